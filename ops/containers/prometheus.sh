# Prometheus of compose.yaml: ops/prometheus/prometheus.yml scraping the app replicas
# (APP_TARGETS, space-separated) with the metrics token's secret, alerting ALERTMANAGER.
set -eu
mkdir -p /tmp/prometheus
targets=$(printf '"%s", ' $APP_TARGETS)
sed -e "s/\"127.0.0.1:8000\"/${targets%, }/" -e "s/\"127.0.0.1:9093\"/\"$ALERTMANAGER\"/" \
    /etc/shopapi/prometheus/prometheus.yml >/tmp/prometheus/prometheus.yml
cp /etc/shopapi/prometheus/alerts.yml /tmp/prometheus/
cp /run/secrets/metrics_token /tmp/prometheus/shopapi-metrics-token
exec prometheus --config.file=/tmp/prometheus/prometheus.yml --storage.tsdb.path=/prometheus \
    --web.listen-address="$PROMETHEUS_BIND"
