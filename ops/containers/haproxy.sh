# HAProxy of compose.yaml: ops/haproxy.cfg with a `server` line per app replica (APP_SERVERS,
# space-separated addresses), as an operator appends them, and the database's entry
# (haproxy-database.cfg: the Patroni node whose /primary answers 200).
set -eu
export HAPROXY_STATS_SOCKET="${HAPROXY_STATS_SOCKET:-/tmp/haproxy.sock}"
config=/tmp/haproxy.cfg
# HAPROXY_MAXCONN: fewer connections than the file's, where the open-file limit is low.
sed -e "${HAPROXY_MAXCONN:+s/^    maxconn .*/    maxconn $HAPROXY_MAXCONN/}" /etc/shopapi/haproxy.cfg >"$config"
n=0
for server in $APP_SERVERS; do
    n=$((n + 1))
    echo "    server app$n $server" >>"$config"
done
exec haproxy -W -db -f "$config" -f /etc/shopapi/containers/haproxy-database.cfg
