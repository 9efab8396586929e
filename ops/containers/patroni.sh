# A Patroni node of compose.yaml: ops/patroni/patroni.yml with this node's settings from the
# environment (PATRONI_NAME, its addresses) and its passwords from the compose secrets.
set -eu
export PATRONI_POSTGRESQL_DATA_DIR="${PATRONI_POSTGRESQL_DATA_DIR:-/var/lib/postgresql/patroni}"
export PATRONI_POSTGRESQL_BIN_DIR="${PATRONI_POSTGRESQL_BIN_DIR:-$(dirname "$(command -v postgres)")}"
export PATRONI_POSTGRESQL_PGPASS="${PATRONI_POSTGRESQL_PGPASS:-/tmp/pgpass}"
export PATRONI_SUPERUSER_USERNAME="${PATRONI_SUPERUSER_USERNAME:-postgres}"
export PATRONI_SUPERUSER_PASSWORD="$(cat /run/secrets/database_password)"
export PATRONI_REPLICATION_USERNAME="${PATRONI_REPLICATION_USERNAME:-replicator}"
export PATRONI_REPLICATION_PASSWORD="$(cat /run/secrets/replication_password)"
exec patroni /etc/shopapi/patroni/patroni.yml
