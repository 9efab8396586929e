"""What operators see: JSON logs, request ids, Prometheus metrics, alerts."""
