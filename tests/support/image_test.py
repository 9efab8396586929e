"""`make image-test`: the image alone serves the demo, then compose.yaml's whole layout runs from
it with a plain `podman-compose up -d`: migrated once, the README's first requests through
HAProxy as the app's own database role, a Patroni switchover whose promotion callback advances
the sequences, one app replica stopped (it drains) while the other serves, users and health
checks inspected; then every container, volume, pod and the database nodes' image removed.

Ports, project name and secrets are this run's own, so two checkouts can run it at once.
"""

import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import psycopg2

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shopapi.testing.ports import free_port  # noqa: E402

# podman's settings for this machine, as `make image-test` gives them.
os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "ops/containers/containers.conf"))
IMAGE = os.environ.get("SHOPAPI_IMAGE", "localhost/shopapi:latest")
PORTS = [
    "SHOPAPI_PORT",
    "APP1_PORT",
    "APP2_PORT",
    "DATABASE_PORT",
    "DB1_PORT",
    "DB1_API_PORT",
    "DB2_PORT",
    "DB2_API_PORT",
    "ETCD_PORT",
    "ETCD_PEER_PORT",
    "PGBOUNCER_PORT",
    "REDIS_PORT",
    "PROMETHEUS_PORT",
    "ALERTMANAGER_PORT",
]
SERVICE_IMAGES = [
    "PATRONI_BASE",
    "ETCD_IMAGE",
    "HAPROXY_IMAGE",
    "PGBOUNCER_IMAGE",
    "REDIS_IMAGE",
    "PROMETHEUS_IMAGE",
    "ALERTMANAGER_IMAGE",
]
ADMIN_EMAIL = "ops@shop.example"


def say(message: str) -> None:
    print(f"image-test: {message}", flush=True)


def run(*command: str, env=None, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def http(url: str, data: dict | None = None, timeout: float = 5) -> tuple[int, str]:
    body = urllib.parse.urlencode(data).encode() if data else None
    try:
        # Only http://127.0.0.1 URLs made here.
        with urllib.request.urlopen(url, body, timeout=timeout) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


def wait_for(what: str, condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds:.0f} s")
        time.sleep(1)


def the_demo_serves() -> None:
    """`podman run` with nothing but a port: the demo database, its accounts, read-only."""
    port = free_port()
    name = f"shopapi-image-test-demo-{os.getpid()}"
    run(
        "podman",
        "run",
        "-d",
        "--rm",
        "--name",
        name,
        "--read-only",
        "--network",
        "host",
        "-e",
        f"PORT={port}",
        IMAGE,
    )
    try:
        wait_for(
            "the demo image's /readyz",
            lambda: http(f"http://127.0.0.1:{port}/readyz")[0] == 200,
            120,
        )
        status, body = http(
            f"http://127.0.0.1:{port}/v1/oauth/token",
            {"grant_type": "password", "username": "admin@example.com", "password": "admin-pass"},
        )
        assert status == 200 and "access_token" in body, (status, body)
        listening = run("podman", "logs", name)
        assert f"Listening at: http://0.0.0.0:{port}" in listening, listening[-2000:]
        say(f"podman run -e PORT={port} {IMAGE}: the demo answers, its admin logs in")
    finally:
        # --rm takes its anonymous data volume with it.
        run("podman", "stop", "-t", "30", name, check=False)


def first_requests(api: str, admin_password: str) -> str:
    """The README's first-requests block, against `api`, every curl failing on a 4xx or 5xx."""
    readme = (ROOT / "README.md").read_text()
    block = (
        readme.split("<!-- example: first-requests", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    )
    block = block.replace("API=http://127.0.0.1:8000/v1", f"API={api}")
    block = block.replace(
        "-d username=admin@example.com -d password=admin-pass",
        f"-d username={ADMIN_EMAIL} --data-urlencode password={admin_password}",
    )
    assert f"API={api}" in block and ADMIN_EMAIL in block, "the README's block changed its shape"
    script = (
        'set -euo pipefail\ncurl() { command curl --fail-with-body --show-error "$@"; }\n' + block
    )
    return run("bash", "-c", script, timeout=60)


def requests_through(url: str, stop: threading.Event, statuses: list) -> None:
    while not stop.is_set():
        statuses.append(http(url)[0])
        time.sleep(0.05)


def scalar(url: str, query: str, *parameters):
    with psycopg2.connect(url, connect_timeout=5) as connection, connection.cursor() as cursor:
        cursor.execute(query, parameters)
        row = cursor.fetchone()
    connection.close()
    return row[0] if row else None


def the_app_is_not_the_superuser(secret_files: dict, ports: dict, superuser_password: str) -> None:
    """The app's role owns the schema and is no superuser; PgBouncer lets in no one else."""
    url = secret_files["database_url"]
    assert scalar(url, "SELECT current_user") == "shopapi"
    assert scalar(url, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
    owner = "SELECT tableowner FROM pg_tables WHERE tablename = 'schema_migrations'"
    assert scalar(url, owner) == "shopapi"
    superuser = (
        f"postgresql://postgres:{superuser_password}@127.0.0.1:{ports['PGBOUNCER_PORT']}/shopapi"
    )
    try:
        scalar(superuser, "SELECT 1")
    except psycopg2.OperationalError:
        pass
    else:
        raise AssertionError("PgBouncer let the superuser in")
    say("the app is PostgreSQL's role shopapi, no superuser, owning the schema")


def a_switchover_advances_the_sequences(project: str, ports: dict, url: str) -> None:
    """`patronictl switchover` to the synchronous standby; Patroni's on_role_change callback
    (models.after_promotion) on the new primary records its timeline in sequence_advance."""

    def cluster() -> dict[str, dict]:
        status, body = http(f"http://127.0.0.1:{ports['DB1_API_PORT']}/cluster")
        return {m["name"]: m for m in json.loads(body)["members"]} if status == 200 else {}

    leader = next(name for name, member in cluster().items() if member["role"] == "leader")
    candidate = {"db1": "db2", "db2": "db1"}[leader]
    run(
        "podman",
        "exec",
        f"{project}_{leader}_1",
        "patronictl",
        "-c",
        "/tmp/patroni",  # noqa: S108 (in the node's container: ops/containers/patroni.sh)
        "switchover",
        "--leader",
        leader,
        "--candidate",
        candidate,
        "--force",
        timeout=120,
    )
    wait_for(
        f"{candidate} the leader, {leader} its synchronous standby",
        lambda: (
            {n: m["role"] for n, m in cluster().items()}
            == {candidate: "leader", leader: "sync_standby"}
        ),
        180,
    )
    timeline = cluster()[candidate]["timeline"]
    advanced = "SELECT margin FROM sequence_advance WHERE timeline_id = %s"
    wait_for(
        f"the sequences advanced on timeline {timeline}",
        lambda: _answers(url, advanced, timeline),
        60,
    )
    say(f"switchover to {candidate}: timeline {timeline}'s sequences advanced by its callback")


def _answers(url: str, query: str, *parameters) -> bool:
    try:
        return scalar(url, query, *parameters) is not None
    except psycopg2.Error:
        return False


def main() -> int:
    run_id = f"{os.getpid()}{secrets.token_hex(2)}"
    project = f"shopapi-it-{run_id}"
    work = pathlib.Path(tempfile.mkdtemp(prefix="shopapi-image-test-"))
    ports = {name: str(free_port()) for name in PORTS}
    admin_password = secrets.token_urlsafe(12)
    app_password = secrets.token_urlsafe(16)
    superuser_password = secrets.token_urlsafe(16)
    app = f"shopapi:{app_password}@127.0.0.1"
    secret_files = {
        "database_url": f"postgresql://{app}:{ports['PGBOUNCER_PORT']}/shopapi",
        "database_primary_url": f"postgresql://{app}:{ports['DATABASE_PORT']}/shopapi",
        "database_app_password": app_password,
        "database_superuser_password": superuser_password,
        "replication_password": secrets.token_urlsafe(16),
        "jwt_secret": secrets.token_urlsafe(32),
        "hmac_secret": secrets.token_urlsafe(32),
        "admin_password": admin_password,
        "metrics_token": secrets.token_urlsafe(24),
    }
    (work / "secrets").mkdir()
    for name, value in secret_files.items():
        path = work / "secrets" / name
        path.write_text(value)
        # The containers' users (not root, not the host's) read them through a bind mount.
        path.chmod(0o644)
    # The database nodes' image, built by `up` as it is missing (this run's own tag: removed after).
    patroni_image = f"localhost/shopapi-patroni:it-{run_id}"
    env = (
        os.environ
        | ports
        | {
            "SECRETS_DIR": str(work / "secrets"),
            "SHOPAPI_IMAGE": IMAGE,
            "PATRONI_IMAGE": patroni_image,
            # Its build keeps no intermediate images.
            "BUILDAH_LAYERS": "false",
            "ADMIN_EMAIL": ADMIN_EMAIL,
            # Two descriptors a connection, within an open-file limit of 1024.
            "HAPROXY_MAXCONN": "400",
        }
    )
    # SERVICES_IMAGE: one image for every service (make image-test's, made of Debian's packages).
    for name in SERVICE_IMAGES:
        if "SERVICES_IMAGE" in env:
            env.setdefault(name, env["SERVICES_IMAGE"])
    missing = [name for name in SERVICE_IMAGES if name not in env]
    assert not missing, f"set {', '.join(missing)} (make image-test does)"
    compose = [
        str(ROOT / ".venv/bin/podman-compose"),
        "-p",
        project,
        "-f",
        str(ROOT / "compose.yaml"),
    ]
    started = time.monotonic()
    try:
        the_demo_serves()

        say(f"compose project {project}, balancer on 127.0.0.1:{ports['SHOPAPI_PORT']}")
        # As a user starts it: the apps and the worker wait for the schema, not for migrate.
        run(*compose, "up", "-d", env=env, timeout=900)
        say(f"podman-compose up -d returned after {time.monotonic() - started:.0f} s")
        migrate = f"{project}_migrate_1"
        exit_code = run("podman", "wait", migrate, timeout=600).strip()
        logs = run("podman", "logs", migrate)
        assert exit_code == "0", f"the migrations exited {exit_code}:\n{logs}"
        assert "migrations applied: m0001_initial" in logs, logs
        say(f"migrated {time.monotonic() - started:.0f} s after the start")
        balancer = f"http://127.0.0.1:{ports['SHOPAPI_PORT']}"
        for app_port in ("APP1_PORT", "APP2_PORT"):
            wait_for(
                f"{app_port}'s /readyz",
                lambda app_port=app_port: (
                    http(f"http://127.0.0.1:{ports[app_port]}/readyz")[0] == 200
                ),
                600,  # a busy machine starts the workers slowly
            )
        wait_for("the balancer's /readyz", lambda: http(f"{balancer}/readyz")[0] == 200, 60)
        say(f"every app replica ready {time.monotonic() - started:.0f} s after the start")

        def roles() -> list[str]:
            status, body = http(f"http://127.0.0.1:{ports['DB1_API_PORT']}/cluster")
            members = json.loads(body)["members"] if status == 200 else []
            return sorted(member["role"] for member in members)

        try:
            wait_for(
                "Patroni's synchronous standby", lambda: roles() == ["leader", "sync_standby"], 300
            )
        except AssertionError:
            print(run("podman", "logs", "--tail", "60", f"{project}_db2_1"), file=sys.stderr)
            raise
        say("Patroni: a leader and a synchronous standby")

        answers = first_requests(f"{balancer}/v1", admin_password)
        assert '"status":"paid"' in answers.replace(" ", ""), answers
        say("the README's first requests through HAProxy: every answer 2xx")
        the_app_is_not_the_superuser(secret_files, ports, superuser_password)

        a_switchover_advances_the_sequences(project, ports, secret_files["database_primary_url"])
        wait_for("the balancer's /readyz", lambda: http(f"{balancer}/readyz")[0] == 200, 60)
        first_requests(f"{balancer}/v1", admin_password)
        say("the first requests pass again on the new primary")

        app1, app2 = (f"{project}_{service}_1" for service in ("app1", "app2"))
        for container in (app1, app2, f"{project}_worker_1"):
            user = run("podman", "exec", container, "id", "-u").strip()
            assert user != "0", f"{container} runs as root"
        run("podman", "healthcheck", "run", app2)
        say("the app containers run as uid 10001; the image's HEALTHCHECK passes")

        statuses: list[int] = []
        stop = threading.Event()
        load = threading.Thread(
            target=requests_through, args=(f"{balancer}/v1/openapi.json", stop, statuses)
        )
        load.start()
        stopping = time.monotonic()
        run("podman", "stop", "-t", "60", app1, timeout=90)
        stopped_after = time.monotonic() - stopping
        time.sleep(2)
        stop.set()
        load.join()
        exit_code = run("podman", "inspect", "--format", "{{.State.ExitCode}}", app1).strip()
        failed = [status for status in statuses if status != 200]
        assert exit_code == "0", f"app1 exited {exit_code}"
        assert stopped_after >= 5, f"app1 stopped {stopped_after:.1f} s after SIGTERM: no drain"
        assert statuses and not failed, (
            f"{len(failed)} of {len(statuses)} requests failed: {set(failed)}"
        )
        assert http(f"{balancer}/readyz")[0] == 200
        first_requests(f"{balancer}/v1", admin_password)
        say(
            f"app1 stopped (SIGTERM, drained {stopped_after:.1f} s, exit 0); {len(statuses)} "
            "requests meanwhile all 200, and app2 alone serves the first requests"
        )
        return 0
    finally:
        logs = run(*compose, "logs", env=env, timeout=120, check=False) if sys.exc_info()[0] else ""
        if logs:
            print(logs[-20000:], file=sys.stderr)
        run(*compose, "down", "-v", "-t", "30", env=env, timeout=300, check=False)
        label = f"label=io.podman.compose.project={project}"
        left = run("podman", "ps", "-a", "-q", "--filter", label).split()
        left += run("podman", "volume", "ls", "-q", "--filter", label).split()
        left += run("podman", "pod", "ps", "-q", "--filter", f"name=pod_{project}").split()
        # Whatever `down` left (it was interrupted, or failed) goes too, and is reported.
        run("podman", "pod", "rm", "-f", f"pod_{project}", check=False)
        run("podman", "rm", "-f", "-v", *left, check=False) if left else None
        for volume in run("podman", "volume", "ls", "-q", "--filter", label).split():
            run("podman", "volume", "rm", "-f", volume, check=False)
        run("podman", "rmi", "-f", patroni_image, check=False)
        shutil.rmtree(work, ignore_errors=True)
        say(f"{time.monotonic() - started:.0f} s; left behind: {left or 'nothing'}")
        if left and not sys.exc_info()[0]:
            raise AssertionError(f"left behind: {left}")


if __name__ == "__main__":
    sys.exit(main())
