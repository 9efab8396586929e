"""The production server: gunicorn managing uvicorn workers, one per core, each serving
`app:create_app()`. Run it with `make serve-prod`, or
`gunicorn -c ops/gunicorn.conf.py 'app:create_app()'`.

gunicorn reads this file in its master process before it starts any worker, which is what the
settings below rely on. Every log line is JSON on stdout, gunicorn's own included, and a run
leaves nothing behind: no metrics directory in the temporary directory, no control socket.
"""

import atexit
import functools
import json
import logging
import multiprocessing
import os
import pathlib
import secrets
import shutil
import socket
import tempfile

from gunicorn import sock as gunicorn_sock

from shopapi.pipeline.http_server import worker_sockets
from shopapi.settings import Settings, generated_secrets

log = logging.getLogger("gunicorn.error")

bind = [os.environ.get("BIND", "127.0.0.1:8000")]
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
# uvicorn's worker, speaking uvicorn's httptools protocol with limits on a request's head (32 KiB,
# 100 fields, 10 s to arrive) and body (REQUEST_BODY_TIMEOUT_SECONDS to arrive,
# REQUEST_BODIES_IN_FLIGHT_MAX_BYTES at once per worker; shopapi/pipeline/http_server.py).
# gunicorn's limit_request_line, limit_request_fields and limit_request_field_size would not
# apply: uvicorn parses requests.
worker_class = "shopapi.pipeline.http_server.UvicornWorker"
# Each worker listens on sockets of its own (SO_REUSEPORT), once its app is loaded and serves
# (shopapi/pipeline/http_server.py), and the kernel spreads new connections over them evenly. On
# one shared socket, whichever worker woke first took a whole burst of connections, and kept
# them: under an open-loop load one worker held 337 connections and the other 87
# (bench/results/load-one-socket.md, the steps), the first shedding requests while the second
# had a core to spare. The master holds the ports meanwhile (_hold_ports). The price: another
# shopapi of the same user can bind the same port beside this one, rather than failing (a host
# runs one server); and a worker stopping alone resets the connections still queued on its
# socket, unless net.ipv4.tcp_migrate_req hands them to the others (docs/operations.md).
reuse_port = True
# gunicorn opens a worker's sockets in the worker just after its fork, listening: the kernel then
# queues connections for a worker that cannot answer them for seconds, and a SIGTERM meanwhile
# resets them. A worker's sockets are bound there instead, and listened on once it serves
# (worker_sockets). The master keeps gunicorn's own (it opens none with reuse_port).
_MASTER_PID = os.getpid()
_gunicorn_create_sockets = getattr(
    gunicorn_sock.create_sockets, "__wrapped__", gunicorn_sock.create_sockets
)  # as gunicorn made it, when a reload (HUP) reads this file again


@functools.wraps(_gunicorn_create_sockets)
def _create_sockets(conf, log, fds=None):
    if os.getpid() == _MASTER_PID:  # gunicorn calls it in a worker only with reuse_port
        return _gunicorn_create_sockets(conf, log, fds)
    return worker_sockets(conf, log)


gunicorn_sock.create_sockets = _create_sockets
# Idle kept-alive connections close after this (as `make serve`'s uvicorn does); a load balancer
# in front should give up on idle connections sooner.
keepalive = 5
# On SIGTERM each worker drains first (DRAIN_SECONDS serving with /readyz at 503,
# shopapi/pipeline/draining.py), then finishes what is in flight: the master waits that long and
# 30 s more (gunicorn's default) before it kills a worker.
graceful_timeout = Settings.from_env(warn_of_generated_secrets=False).drain_seconds + 30
# The app writes its own request log (JSON on stdout); gunicorn's would repeat it.
accesslog = None
# The app reads X-Forwarded-For itself, believing only the proxies FORWARDED_ALLOW_IPS names
# (shopapi/pipeline/forwarded.py). gunicorn reads that variable too and hands it to the uvicorn
# workers, whose own reading would replace the peer's address before the app sees it (and takes any
# value, an address or not): theirs is off.
forwarded_allow_ips = ""
# gunicorn 25.1+ would open a control socket for gunicornc under $XDG_RUNTIME_DIR or
# ~/.gunicorn/, and leave that directory behind; signals to the master do the same (HUP, TTIN,
# TTOU, TERM).
control_socket_disable = True

# Every line JSON on stdout, as the app's request log is: gunicorn's own lines, and the uvicorn
# workers', which write through gunicorn.error's handlers, with the configuration `make serve`
# gives uvicorn. gunicorn.error keeps the level --log-level gives it; gunicorn.access writes
# nothing (the app's request log is the access log).
logconfig_dict = json.loads((pathlib.Path(__file__).parent / "logging.json").read_text())
logconfig_dict["loggers"] |= {
    "gunicorn.error": {"handlers": ["stdout"], "propagate": False},
    "gunicorn.access": {"handlers": [], "propagate": False},
}

# Every worker must sign and check tokens and cursors with the same secrets. Unset, one is
# generated here, once, for all workers (tokens then end with the server; set them for real).
# The master says so when it starts; the workers find them set and say nothing.
_generated_secrets = generated_secrets(os.environ)
for _name in _generated_secrets:
    os.environ[_name] = secrets.token_urlsafe(32)

# Each worker keeps its metrics in files here and a scrape adds them up (prometheus_client's
# multiprocess mode). Set before any worker imports prometheus_client. Unless the operator names
# one, the directory is made for this run and removed when it ends (on_exit); the variable that
# says so outlives a reload (HUP), which reads this file again.
_CREATED_METRICS_DIR = "SHOPAPI_CREATED_METRICS_DIR"


def _remove_created_metrics_dir() -> None:
    created = os.environ.pop(_CREATED_METRICS_DIR, None)
    if created:
        shutil.rmtree(created, ignore_errors=True)


if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="shopapi-metrics-")
    os.environ[_CREATED_METRICS_DIR] = os.environ["PROMETHEUS_MULTIPROC_DIR"]

    @atexit.register
    def _remove_at_master_exit() -> None:
        # When the server fails to start (a port in use), on_exit is not called. The workers,
        # forked from the master, inherit this too: the directory is not theirs to remove.
        if os.getpid() == _MASTER_PID:
            _remove_created_metrics_dir()


# The ports the master holds while the workers listen (on_starting).
_held_ports: list[socket.socket] = []


def _hold_ports(server) -> None:
    """With reuse_port the master listens on nothing, and a worker opens its socket only once its
    app is loaded, seconds after: meanwhile the port would be free for any process to take. The
    master binds each address first, with SO_REUSEPORT and without listening (so it is given no
    connection), for as long as it runs: a port already in use stops the server at once, as
    before, and the workers' sockets join it."""
    for address in server.cfg.address:
        if not isinstance(address, tuple):  # a Unix socket: not shared
            continue
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        held = socket.socket(family, socket.SOCK_STREAM)
        # Not SO_REUSEADDR: with it, a socket that does not listen lets any other with it listen.
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind((host, port))
        _held_ports.append(held)


def on_starting(server):
    _hold_ports(server)
    for name in _generated_secrets:
        server.log.warning(
            "%s is not set: using a generated one for this server's workers (fine until it "
            "restarts)",
            name,
        )
    # Files a previous run left would be added into this run's counts.
    directory = pathlib.Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()


def when_ready(server):
    """METRICS_BIND (host:port): serve /metrics on a separate, unauthenticated listener, from
    the master, summing every worker. Bind it where only Prometheus reaches."""
    address = os.environ.get("METRICS_BIND")
    if not address:
        return
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    log.info("metrics on http://%s/metrics", address)


def post_fork(server, worker):
    # What start-up finds in the database (accounts with published passwords, models/demo.py) is
    # said once, by the first worker: the others, and those started later, would repeat it.
    if worker.age > 1:
        logging.getLogger("shopapi.demo").setLevel(logging.ERROR)


def child_exit(server, worker):
    # A dead worker's in-flight gauge must stop counting; its counters stay in the sums.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    if server.reexec_pid:
        # The master that USR2 started carries on with the directory.
        os.environ.pop(_CREATED_METRICS_DIR, None)
    else:
        _remove_created_metrics_dir()
