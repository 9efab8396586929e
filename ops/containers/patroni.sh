# A Patroni node of compose.yaml: ops/patroni/patroni.yml with this node's settings from the
# environment (PATRONI_NAME, its addresses), its passwords from the compose secrets, and what
# differs in this image: where ops/ and shopapi's virtualenv are (compose.yml below, read after
# patroni.yml and merged over it, as Patroni reads a directory).
set -eu
export PATRONI_POSTGRESQL_DATA_DIR="${PATRONI_POSTGRESQL_DATA_DIR:-/var/lib/postgresql/patroni}"
export PATRONI_POSTGRESQL_BIN_DIR="${PATRONI_POSTGRESQL_BIN_DIR:-$(dirname "$(command -v postgres)")}"
export PATRONI_POSTGRESQL_PGPASS="${PATRONI_POSTGRESQL_PGPASS:-/tmp/pgpass}"
export PATRONI_SUPERUSER_USERNAME="${PATRONI_SUPERUSER_USERNAME:-postgres}"
export PATRONI_SUPERUSER_PASSWORD="$(cat /run/secrets/database_superuser_password)"
export PATRONI_REPLICATION_USERNAME="${PATRONI_REPLICATION_USERNAME:-replicator}"
export PATRONI_REPLICATION_PASSWORD="$(cat /run/secrets/replication_password)"
export APP_DATABASE_PASSWORD_FILE="${APP_DATABASE_PASSWORD_FILE:-/run/secrets/database_app_password}"
config=/tmp/patroni
mkdir -p "$config"
cp /etc/shopapi/patroni/patroni.yml "$config/1-ops.yml"
# The promotion callback as the superuser over this node's socket (pg_hba: local trust).
cat >"$config/2-compose.yml" <<YAML
bootstrap:
  post_bootstrap: sh /etc/shopapi/patroni/app_role.sh
postgresql:
  callbacks:
    on_role_change: >-
      env PGHOST=/var/run/postgresql /opt/shopapi/bin/python -m models.after_promotion
      --database-url postgresql://postgres@:${PATRONI_POSTGRESQL_LISTEN##*:}/shopapi
YAML
exec patroni "$config"
