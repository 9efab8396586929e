#!/bin/sh
# shopapi's container entrypoint. Each of the secrets below may come from a file (compose's
# secrets, /run/secrets/...): NAME_FILE names it, and its content (one trailing newline dropped)
# becomes NAME. Then the command:
#   serve    (default) gunicorn with ops/gunicorn.conf.py on $HOST:$PORT, as `make serve-prod`;
#            with DATABASE_URL unset, the demo database is migrated and seeded first, as `make run`
#   worker   the delivery worker (`make worker`)
#            Both wait, with DATABASE_URL set, until its schema is current: the migrations are
#            `migrate`'s, run once from one place (compose.yaml's migrate service)
#   migrate  the migrations (`make migrate`), then exit; tried again every 2 s for up to
#            DATABASE_WAIT_SECONDS (0) while they fail, for a database that is still starting
#   seed     the demo data (`make seed`; SEED_DEMO=1 for a database of your own), then exit
#   anything else is run as it is (`sh`, `python -m ...`).
set -eu

for name in JWT_SECRET HMAC_SECRET ADMIN_PASSWORD METRICS_TOKEN DATABASE_URL \
    DATABASE_REPLICA_URLS SHARED_STORE_URL ALERT_WEBHOOK_URL; do
    eval "file=\${${name}_FILE:-}"
    if [ -n "$file" ]; then
        if ! [ -r "$file" ]; then
            echo "shopapi: ${name}_FILE names $file, which cannot be read" >&2
            exit 2
        fi
        eval "export $name=\"\$(cat \"\$file\")\""
        unset "${name}_FILE"
    fi
done

# Until no migration is pending, checked every 3 s (the check says what it waits for): a
# server or worker started beside the migrations serves nothing before they are done. The shell
# is PID 1 meanwhile, which ignores SIGTERM unless told.
wait_for_schema() {
    trap 'exit 143' TERM INT
    until python -m models.migrations --check; do
        sleep 3
    done
}

case "${1:-serve}" in
serve)
    if [ -z "${DATABASE_URL:-}" ]; then
        python -m models.migrations
        python -m models.seed
        # The demo database is one SQLite file: one worker, as `make run` serves it.
        export WEB_CONCURRENCY="${WEB_CONCURRENCY:-1}"
    else
        wait_for_schema
    fi
    # gunicorn is PID 1: SIGTERM reaches it, and it drains (DRAIN_SECONDS) before it stops.
    BIND="${BIND:-$HOST:$PORT}" exec gunicorn -c /app/ops/gunicorn.conf.py 'app:create_app()'
    ;;
worker)
    wait_for_schema
    exec python -m shopapi.events.worker
    ;;
migrate)
    deadline=$(($(date +%s) + ${DATABASE_WAIT_SECONDS:-0}))
    until python -m models.migrations; do
        [ "$(date +%s)" -lt "$deadline" ] || exit 1
        sleep 2
    done
    ;;
seed) exec python -m models.seed ;;
*) exec "$@" ;;
esac
