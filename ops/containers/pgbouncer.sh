# PgBouncer of compose.yaml: ops/pgbouncer.ini with where it listens (PGBOUNCER_PORT), where the
# primary is (DATABASE, HAProxy's database entry), logging on stderr, and the app's role
# (shopapi) with its password from its secret as the auth file: the only user it lets in.
set -eu
umask 077
host=${DATABASE%:*}
port=${DATABASE##*:}
sed -e "s/^listen_port = .*/listen_port = $PGBOUNCER_PORT/" \
    -e "s/^shopapi = .*/shopapi = host=$host port=$port dbname=shopapi/" \
    -e "s|^auth_file = .*|auth_file = /tmp/userlist.txt|" \
    -e "s|^logfile = .*|logfile =|" \
    -e "s|^pidfile = .*|pidfile =|" \
    -e "s|^unix_socket_dir = .*|unix_socket_dir =|" \
    /etc/shopapi/pgbouncer.ini >/tmp/pgbouncer.ini
printf '"shopapi" "%s"\n' "$(cat /run/secrets/database_app_password)" >/tmp/userlist.txt
exec pgbouncer /tmp/pgbouncer.ini
