# Two commands set everything up on a fresh machine: `make run` and `make test`.
# Any variable set in the environment wins over the defaults here.
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000
# Nothing else needs setting: unset DATABASE_URL is the demo database (data/shopapi.db), which
# `make seed` fills with demo data and demo accounts whose passwords the README publishes. Name a
# database of your own (DATABASE_URL) and your admin (ADMIN_EMAIL, ADMIN_PASSWORD; created at
# start-up if absent) and nothing with a published password is created there, unless asked
# for: `make seed-demo` (SEED_DEMO=1). See models/demo.py.
# The proxies whose X-Forwarded-For the app believes (FORWARDED_ALLOW_IPS; none by default):
# the app reads it itself (shopapi/pipeline/forwarded.py), so uvicorn's reading, which would believe any
# local peer, is off. shopapi.pipeline.http_server limits a request's head (32 KiB, 100 fields, 10 s),
# which uvicorn's own protocol does not; idle kept-alive connections close after 5 s.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-dev reset run serve serve-prod worker migrate seed seed-demo test test-deep test-faults test-quick bytecode lint image image-test bench bench-admission bench-hosts bench-ab bench-ab-instructions bench-depth \
	bench-replicas bench-mix-parts soak faults \
	profile clean \
	contract-snapshot contract-tools postman-collection

# The virtualenv, installed again when the dependencies in setup.cfg change: the service's own
# for `make run`, the test and benchmark tools (the dev extra) added for `make test`.
$(BIN)/.installed: setup.cfg pyproject.toml
	@echo "==> The service's dependencies, into $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check --progress-bar on -e .
	touch $@

$(BIN)/.installed-dev: $(BIN)/.installed
	@echo "==> The test and benchmark tools (the dev extra), into $(VENV)"
	$(BIN)/pip install --disable-pip-version-check --progress-bar on -e '.[dev]'
	touch $@

install: $(BIN)/.installed

install-dev: $(BIN)/.installed-dev

# The pinned Node tools that `make lint` and tests/test_contract_tools.py hold the contract to
# (Redocly, Spectral, openapi-typescript, tsc), and the Postman collection's (openapi-to-postmanv2,
# newman); installed again when package-lock.json changes.
CONTRACT_TOOLS := tests/contract_tools
$(CONTRACT_TOOLS)/node_modules/.installed: $(CONTRACT_TOOLS)/package-lock.json
	cd $(CONTRACT_TOOLS) && npm ci --no-audit --no-fund
	touch $@

contract-tools: $(CONTRACT_TOOLS)/node_modules/.installed

migrate: install
	@echo "==> Migrating the database"
	$(BIN)/python -m models.migrations

seed: migrate
	@echo "==> Seeding the database"
	$(BIN)/python -m models.seed

# The demo database from scratch: its file removed, then migrated and seeded again. Refused
# while a server answers on HOST:PORT: it would go on with the old database's revocations and
# ids, refusing fresh tokens as revoked. Any other database (DATABASE_URL) is the operator's to
# empty.
DEMO_DATABASE := data/shopapi.db
reset: install
	@test -z "$(DATABASE_URL)" || \
	  { echo "make reset empties only the demo database ($(DEMO_DATABASE)); DATABASE_URL names another"; exit 1; }
	@if $(BIN)/python -c 'import socket, sys; sys.exit(socket.socket().connect_ex((sys.argv[1], int(sys.argv[2]))))' \
	    "$(HOST)" "$(PORT)" 2>/dev/null; then \
	  echo "make reset: a server answers on $(HOST):$(PORT); stop it (Ctrl-C on make run) first"; exit 1; fi
	@echo "==> Emptying the demo database ($(DEMO_DATABASE))"
	rm -f $(DEMO_DATABASE) $(DEMO_DATABASE)-wal $(DEMO_DATABASE)-shm
	@$(MAKE) --no-print-directory seed

# The demo data and accounts in whatever database DATABASE_URL names (a test or staging one).
seed-demo: migrate
	SEED_DEMO=1 $(BIN)/python -m models.seed

run: seed serve

serve: install
	@echo "shopapi on http://$(HOST):$(PORT)/v1, /v2 and /v3 - docs at http://$(HOST):$(PORT)/v1/ui/,"
	@echo "  http://$(HOST):$(PORT)/v2/ui/ and http://$(HOST):$(PORT)/v3/ui/"
	@echo "A token: curl -s http://$(HOST):$(PORT)/v1/oauth/token -d grant_type=password \\"
	@echo "           --data-urlencode username=<email> --data-urlencode password=<password>"
	@echo "  ($(if $(ADMIN_EMAIL),your admin $(ADMIN_EMAIL),in the demo database admin@example.com / admin-pass)."
	@echo "   In the docs, Authorize under oauth2 (password).)"
	$(BIN)/uvicorn --factory app:create_app --host $(HOST) --port $(PORT) --no-access-log \
	  --log-config ops/logging.json --no-proxy-headers --http shopapi.pipeline.http_server:HttpProtocol \
	  --timeout-keep-alive 5

# gunicorn with one uvicorn worker per core (WEB_CONCURRENCY to change it); see ops/gunicorn.conf.py.
serve-prod: install
	BIND=$(HOST):$(PORT) $(BIN)/gunicorn -c ops/gunicorn.conf.py 'app:create_app()'

# The image (Containerfile) as localhost/shopapi:latest, with podman (ops/containers/build.sh):
# its base made of Debian's packages unless BASE names one (a registry's python:3.11-slim).
# CONTAINERS_CONF: podman's settings for this machine (runc, limits within its hard limits).
export CONTAINERS_CONF ?= $(CURDIR)/ops/containers/containers.conf
image: install-dev
	ops/containers/build.sh

# compose.yaml's whole layout from that image and Debian-made service images, on ports and a
# project name of this run's own (tests/support/image_test.py; a few minutes, as root): a plain
# `podman-compose up -d`, the README's first requests through HAProxy, a database switchover, a
# replica stopped while the other serves; then nothing left behind.
image-test: image
	services=$$(ops/containers/debian-images.sh | sed -n 's/^services=//p') && \
	  SERVICES_IMAGE=$$services $(BIN)/python tests/support/image_test.py

# Delivers webhooks (and push notifications) from the events of a migrated database; see
# shopapi/events/worker.py. On SQLite run one worker; on PostgreSQL as many as you like.
worker: install
	$(BIN)/python -m shopapi.events.worker

# The app's modules compiled ahead: where PYTHONDONTWRITEBYTECODE is set (as on the machines CI
# runs on) Python writes no .pyc, so each server and worker a test starts compiled them again,
# about half a second of CPU each, a few hundred times a run. compileall writes only what changed.
bytecode: install-dev
	$(BIN)/python -m compileall -q app.py handlers models shopapi tests/support

# Two workers more than there are cores: part of the suite waits (servers starting, timeouts,
# the browser), and the cores stay busy meanwhile. On 2 cores: 3 workers took 9:12 where 2 took
# 9:59; on 2026-12-03, 4 took 10:34 where 3 took 11:13 (the suite's cores were a fifth idle).
# On a machine whose cores the suite kept busy, 4 had taken 17:06 against 3's 16:49: a worker's
# own set-up is all a spare one costs. worksteal keeps them all busy to the end.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal
# Every test but the fault suite, which `make test-faults` runs (and `.ci/run` after this), and
# the few that take minutes each (marked `deep`), which `make test-deep` runs.
test: install-dev contract-tools bytecode
	$(PYTEST) --ignore=tests/test_faults.py -m "not deep" $(PYTEST_ARGS)

# The tests that take minutes each (marked `deep`: schemathesis on every served contract, from
# inside and from outside; the package installed at its dependency floors), side by side, and
# the property-based searches (marked `search`) again: `.ci/run` runs this with the deeper `ci`
# Hypothesis profile, at which those searches take minutes too.
test-deep: install-dev contract-tools bytecode
	$(PYTEST) --ignore=tests/test_faults.py -m "deep or search" $(PYTEST_ARGS)

# The fault suite's invariants (tests/test_faults.py, a few minutes, as root): the production
# layout under every fault of `make faults`, with fewer clients. Apart from `make test`, which it
# would hold past ten minutes; `.ci/run` runs both.
test-faults: install-dev bytecode haproxy pgbouncer redis-server patroni etcd iptables
	$(BIN)/python -m pytest tests/test_faults.py $(PYTEST_ARGS)

# The quick loop while working: SQLite only (no PostgreSQL needed), no test marked slow, stopped
# at the first failure. `make test` before a commit.
test-quick: install-dev
	$(PYTEST) -x -m "not slow and not postgresql" $(PYTEST_ARGS)

# After an intended, compatible change to the v1 contract: make it the new baseline that
# tests/test_contract_compatibility.py holds spec/ to.
contract-snapshot: install-dev
	$(BIN)/python tests/support/contract_compatibility.py --write

# After a change to the v3 contract: the Postman collection we ship (docs/postman/), made again
# from it by openapi-to-postmanv2 and tests/support/postman_collection.py, which
# tests/test_postman_collection.py holds it to and runs with newman.
postman-collection: install-dev contract-tools
	$(BIN)/python tests/support/postman_collection.py --write

# The load benchmark (bench/load.py, about 9 minutes): a PostgreSQL primary and a hot standby of
# its own (the machine's PostgreSQL binaries, shopapi/testing/standby.py), seeded at each run, Redis
# (BENCH_REDIS_URL) and Debian's wrk; shopapi reaches both clusters through Debian's pgbouncer,
# which the bench starts (ops/pgbouncer.ini). Then what the revocation check adds to a request
# (bench/revocation_cost.py, A/B in one process), in a database of the machine's PostgreSQL, and
# the list's instructions beside its CPU time for shopapi, the floor and the baseline
# (bench/list_instructions.py, callgrind: Debian's valgrind; about 3 minutes).
# BENCH_QUICK=1: one short round of each phase, to try the script (bench/results/load-quick.md),
# and neither of the others.
REVOCATION_BENCH_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/shopapi_bench_revocation
INSTRUCTIONS_BENCH_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/shopapi_bench_instructions
bench: install-dev wrk pgbouncer valgrind
	$(BIN)/python bench/load.py
	if [ -z "$(BENCH_QUICK)" ] || [ "$(BENCH_QUICK)" = 0 ]; then \
	  BENCH_DATABASE_URL=$(REVOCATION_BENCH_DATABASE_URL) $(BIN)/python bench/revocation_cost.py; \
	  BENCH_DATABASE_URL=$(INSTRUCTIONS_BENCH_DATABASE_URL) $(BIN)/python bench/list_instructions.py; fi

# How a worker should run more requests than it can serve: mix_v3 at 0.2, 0.7, 0.9 and 2.0 of its
# saturation with admission control off and at several limits and waits, interleaved rounds
# (bench/admission_ab.py, about a minute and a half a variant and round: 25 minutes for all);
# ADMISSION_AB='--rounds 3 --variants off "4+8, waits 1 s"' picks: bench/results/admission-ab.md.
ADMISSION_AB ?=
bench-admission: install-dev wrk pgbouncer
	$(BIN)/python bench/admission_ab.py $(ADMISSION_AB)

# What PgBouncer costs a request: the mix direct against through PgBouncer, interleaved rounds in
# one run (bench/pgbouncer_ab.py): bench/results/pgbouncer-ab.md.
.PHONY: bench-pgbouncer
bench-pgbouncer: install-dev wrk pgbouncer
	$(BIN)/python bench/pgbouncer_ab.py

# The mix with one read replica against the primary alone (bench/replicas.py, a few minutes): a
# primary and a hot standby of its own, started from PostgreSQL's binaries, and Debian's wrk.
bench-replicas: install-dev wrk
	$(BIN)/python bench/replicas.py

# make bench's scale-out mode (bench/scale_out.py, a few minutes, as root): BENCH_HOSTS app hosts in
# network namespaces behind HAProxy, the mix through it with 1, 2, ... BENCH_HOSTS in rotation.
BENCH_HOSTS ?= 3
bench-hosts: install-dev wrk
	$(BIN)/python bench/scale_out.py --hosts $(BENCH_HOSTS)

# The fault suite (bench/faults.py, a few minutes, as root): the production layout on this
# machine (the database tier under Patroni: etcd, a primary and its synchronous standby, HAProxy
# finding the primary; a PgBouncer per app host and the worker's, Redis of its own, two app hosts
# in network namespaces behind HAProxy, the worker, a webhook receiver) under a load of idempotent
# writes: this release rolled out over the previous one, then each fault in turn
# (tests/support/faults.py); what clients saw during each,
# and whether every invariant held: bench/results/faults.md. `make test-faults` runs the same
# (tests/test_faults.py, fewer clients) and asserts the invariants.
faults: install-dev haproxy pgbouncer redis-server patroni etcd iptables
	$(BIN)/python bench/faults.py

# The soak (bench/soak.py): the mix at half its saturated rate (SOAK_RATE to give one) for
# SOAK_MINUTES (30), a line a minute: latency, errors, the server's memory, the tables that grow.
# SOAK_HEAP=1: one worker, its heap traced, and what grew in it (bench/results/soak-heap.md).
soak: install-dev wrk
	$(BIN)/python bench/soak.py

# The benchmarks' tools, Debian's, each installed when missing (as root): the load generator,
# the pooler the bench starts in front of its clusters, the instruction counter, and the balancer,
# Redis, Patroni and iptables of the fault suite's layout.
BENCH_TOOLS := wrk pgbouncer valgrind haproxy redis-server patroni iptables
.PHONY: $(BENCH_TOOLS) etcd
$(BENCH_TOOLS):
	@command -v $@ >/dev/null || test -x /usr/sbin/$@ || apt-get install -y -q $@ >/dev/null || \
	  (apt-get update -q && apt-get install -y -q $@)
# etcd, Patroni's consensus store, is Debian's etcd-server package.
etcd:
	@command -v etcd >/dev/null || apt-get install -y -q etcd-server >/dev/null || \
	  (apt-get update -q && apt-get install -y -q etcd-server)

# App CPU per request of this tree (uncommitted changes included) against BASE, a revision, in
# one run: each app driven straight through its ASGI pipeline, interleaved rounds, medians
# (bench/pipeline_ab.py; PostgreSQL, databases shopapi_ab_base and shopapi_ab_head).
BASE ?= HEAD
bench-ab: install-dev
	$(BIN)/python bench/pipeline_ab.py --base $(BASE)

# The same A/B in instructions counted by callgrind (Debian's valgrind): steadier than CPU time
# on a busy or shared machine, for small differences (about 5 minutes).
bench-ab-instructions: install-dev valgrind
	$(BIN)/python bench/pipeline_ab.py --base $(BASE) --instructions

# Does a request cost more in the mix than alone? The mix against its operations alone, on one
# server and one PostgreSQL (bench/mix_parts.py, about 7 minutes): bench/results/mix-parts.md.
bench-mix-parts: install-dev wrk
	$(BIN)/python bench/mix_parts.py

# Where a worker's CPU goes under the load mix (py-spy): bench/results/profile.md.
profile: install-dev wrk
	$(BIN)/python bench/profile.py

# How a list page's cost grows with its depth, offset against cursor (in-process).
bench-depth: install-dev
	$(BIN)/python bench/list_depth.py

# lint-imports: the rooms' dependency rules (setup.cfg's [importlinter], docs/architecture.md).
lint: install-dev contract-tools
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/openapi-spec-validator spec/openapi.yaml spec/v2.yaml spec/v3.yaml spec/components.yaml spec/well-known.yaml
	REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(CONTRACT_TOOLS)/node_modules/.bin/redocly lint \
	  spec/openapi.yaml spec/v2.yaml spec/v3.yaml spec/components.yaml spec/well-known.yaml spec/metrics.yaml
	$(CONTRACT_TOOLS)/node_modules/.bin/spectral lint --fail-severity=warn \
	  spec/openapi.yaml spec/v2.yaml spec/v3.yaml spec/components.yaml spec/well-known.yaml spec/metrics.yaml

# Everything `make run` and `make test` made: the virtualenv and the Node tools too.
clean:
	rm -rf $(VENV) data *.egg-info .pytest_cache .hypothesis $(CONTRACT_TOOLS)/node_modules spec/.checked
