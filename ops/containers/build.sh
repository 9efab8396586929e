#!/usr/bin/env bash
# `make image`: builds localhost/shopapi:latest from the Containerfile. BASE unset: a base made of
# Debian's packages (debian-images.sh), and the wheels built here on the host, where pip reaches
# the package index, into build/wheelhouse, which the builder stage installs from offline. The
# dependencies' wheels are kept between runs in $IMAGE_CACHE, keyed by a hash of setup.cfg and
# pyproject.toml: a clean clone rebuilds only shopapi's own wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-localhost/shopapi:latest}
PIP=${PIP:-.venv/bin/pip}
CACHE=${IMAGE_CACHE:-/var/cache/shopapi-images}
if [ -z "${BASE:-}" ]; then
    BASE=$(ops/containers/debian-images.sh | sed -n 's/^python=//p')
fi

# async-timeout: redis needs it under Python < 3.11.3 (Debian 12's is 3.11.2), which pip running
# on a newer Python leaves out. setuptools: shopapi's own wheel then builds offline.
extra="async-timeout setuptools>=68"
deps_key=$(echo "$extra" | cat - setup.cfg pyproject.toml | sha256sum | cut -c1-12)
deps="$CACHE/wheels-$deps_key"
if ! [ -d "$deps" ]; then
    mkdir -p "$CACHE"
    rm -rf "$deps.partial"
    # shellcheck disable=SC2086
    "$PIP" wheel --quiet --disable-pip-version-check -w "$deps.partial" . $extra
    rm -f "$deps.partial"/shopapi-*.whl
    mv "$deps.partial" "$deps"
fi
rm -rf build/wheelhouse
mkdir -p build
cp -r "$deps" build/wheelhouse
"$PIP" wheel --quiet --disable-pip-version-check --no-deps --no-index --find-links "$deps" \
    -w build/wheelhouse .

# docker format: OCI images drop HEALTHCHECK. No layer cache (the wheelhouse changes at every
# build), so no intermediate images are left; the image this one replaces is removed.
previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build --quiet --layers=false --format docker --build-arg BASE="$BASE" --tag "$IMAGE" \
    -f Containerfile . >/dev/null
rm -rf build/wheelhouse
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true  # still used by a container: kept
fi
echo "$IMAGE: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}') (base $BASE)"
