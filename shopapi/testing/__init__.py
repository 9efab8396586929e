"""What the tests and the benchmarks both start: PgBouncer from ops/pgbouncer.ini, a PostgreSQL
primary with a hot standby, app hosts behind HAProxy. It needs a checkout (ops/), so it is left
out of the built package (setup.cfg)."""
