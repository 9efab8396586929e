#!/usr/bin/env bash
# Base images made of Debian's packages (mmdebstrap, then `podman import`), for machines that
# reach Debian's archive but no image registry. Prints two lines, `python=<image>` (the app's
# BASE) and `services=<image>` (PostgreSQL + Patroni, etcd, PgBouncer, Redis, HAProxy,
# Prometheus, Alertmanager: one image for every service of compose.yaml).
#
# Each image is tagged with a hash of its package list, suite and settings, and built only
# when podman's store lacks that tag: CI's clean clones reuse what an earlier run built. Run as
# root (podman's store under /var/lib/containers is the cache). DEBIAN_SOURCES names the apt
# sources to build from (default: this machine's own).
set -euo pipefail

SUITE=${DEBIAN_SUITE:-bookworm}
SOURCES=${DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}
[ -r "$SOURCES" ] || SOURCES="deb http://deb.debian.org/debian $SUITE main"

PYTHON_PACKAGES="python3,python3-venv,ca-certificates"
# The PostgreSQL binaries' directory joins PATH, as in the public postgres image; Debian names
# Alertmanager's binary prometheus-alertmanager: `alertmanager` too, as in the public image.
SERVICES_PACKAGES="ca-certificates,curl,postgresql-15,postgresql-client-15,patroni,python3-etcd,\
etcd-server,etcd-client,pgbouncer,redis-server,redis-tools,haproxy,prometheus,prometheus-alertmanager"
SERVICES_PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

HOOKS='chroot "$1" sh -c "! command -v prometheus-alertmanager >/dev/null || ln -s /usr/bin/prometheus-alertmanager /usr/local/bin/alertmanager"'

image() {  # image NAME PACKAGES [podman-import --change ...]
    local name=$1 packages=$2
    shift 2
    local key
    key=$(printf '%s\n' "$SUITE" "$packages" "$*" "$HOOKS" | sha256sum | cut -c1-12)
    local tag="localhost/shopapi-debian-$name:$key"
    if ! podman image exists "$tag"; then
        local work
        work=$(mktemp -d)
        # Quiet, but its log is shown when it fails.
        if ! mmdebstrap --variant=minbase --include="$packages" \
            --customize-hook="$HOOKS" \
            --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
            "$SUITE" "$work/rootfs.tar" "$SOURCES" >"$work/log" 2>&1; then
            cat "$work/log" >&2
            rm -rf "$work"
            exit 1
        fi
        podman import --quiet "$@" "$work/rootfs.tar" "$tag" >/dev/null
        rm -rf "$work"
    fi
    echo "$name=$tag"
}

image python "$PYTHON_PACKAGES" --change 'CMD ["python3"]'
image services "$SERVICES_PACKAGES" --change "ENV PATH=$SERVICES_PATH" --change 'CMD ["bash"]'
