"""The package as an operator gets it: `pip install` (not editable) into a clean virtualenv, with
every runtime dependency at the lowest version setup.cfg allows, migrated and served from a
directory outside the repository, by uvicorn and by the production server. It fails when the
package leaves out a file the app reads at run time (spec/*.yaml, a migration) or when a floor
in install_requires does not work."""

import configparser
import contextlib
import os
import pathlib
import shutil
import subprocess
import sys

import httpx
import pytest
from packaging.requirements import Requirement
from support.live import ROOT, free_port, wait_until_up

pytestmark = pytest.mark.slow

# A fresh install, then starting an app whose every module is imported for the first time, on a
# machine that may be running other suites: minutes are possible, so the waits are long.
INSTALL_TIMEOUT = 900
ADMIN_EMAIL = "packaging-admin@example.com"
ADMIN_PASSWORD = "packaging-admin-pass"
# Not part of the package: left out of the copy that is built (see _source_copy).
NOT_BUILT = {"build", "dist", "data", "tests", "bench", "ops"}


def floors() -> dict[str, str]:
    """Each runtime dependency's name and the version its `>=` names, from setup.cfg."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    found = {}
    for line in config["options"]["install_requires"].strip().splitlines():
        requirement = Requirement(line)
        lowest = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(lowest) == 1, f"{line!r}: every runtime dependency needs one >= floor"
        found[requirement.name] = lowest[0]
    return found


def _source_copy(destination: pathlib.Path) -> pathlib.Path:
    """The work tree to build, minus what is not packaged. Building in the repository itself
    would leave build/ and *.egg-info there, and a file deleted from the source but still in
    build/lib would go on being packaged."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        ignored = {n for n in names if n.startswith(".") or n == "__pycache__"}
        if pathlib.Path(directory) == ROOT:
            ignored |= {n for n in names if n in NOT_BUILT or n.endswith(".egg-info")}
        return ignored

    return pathlib.Path(shutil.copytree(ROOT, destination, ignore=ignore))


def _install(tmp_path: pathlib.Path) -> pathlib.Path:
    """A new virtualenv with the package installed at the floors; its bin/ directory."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    constraints = tmp_path / "floors.txt"
    # Names only: pip refuses extras in a constraint, and they stay on setup.cfg's requirement.
    constraints.write_text("".join(f"{name}=={v}\n" for name, v in floors().items()))
    # pip's cache is kept: the floors' wheels come from it after the first run.
    install = subprocess.run(
        [
            venv / "bin/python",
            "-m",
            "pip",
            "install",
            "--quiet",
            "-c",
            constraints,
            _source_copy(tmp_path / "source"),
        ],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return venv / "bin"


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _check_serves(base: str, sku: str) -> None:
    """The contract, a token for the admin created at start-up, and a product written and listed
    through the installed migrations' tables."""
    spec = httpx.get(f"{base}/v1/openapi.json", timeout=30)
    assert spec.status_code == 200
    assert spec.json()["openapi"].startswith("3.0")

    token = httpx.post(
        f"{base}/v1/oauth/token",
        data={"grant_type": "password", "username": ADMIN_EMAIL, "password": ADMIN_PASSWORD},
        timeout=30,
    )
    assert token.status_code == 200, token.text
    headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
    product = {"sku": sku, "name": "Installed", "price_cents": 100, "stock": 1}
    created = httpx.post(f"{base}/v1/products", json=product, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    listed = httpx.get(f"{base}/v1/products", params={"per_page": 100}, headers=headers, timeout=30)
    assert listed.status_code == 200, listed.text
    assert sku in {p["sku"] for p in listed.json()["data"]}


@pytest.mark.deep  # an install of every dependency's oldest accepted release: minutes
def test_installed_package_serves_at_dependency_floors(tmp_path):
    bin_dir = _install(tmp_path)
    # Outside the repository, so that nothing is imported from the work tree (uvicorn puts its
    # working directory on sys.path).
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "DATABASE_URL": f"sqlite:///{workdir}/shopapi.db",
        "JWT_SECRET": "packaging-test-jwt-secret-0123456789",
        "HMAC_SECRET": "packaging-test-cursor-secret-0123456789",
        "ADMIN_EMAIL": ADMIN_EMAIL,
        "ADMIN_PASSWORD": ADMIN_PASSWORD,
    }
    where = subprocess.run(
        [
            bin_dir / "python",
            "-c",
            "import importlib.util; print(importlib.util.find_spec('app').origin)",
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(str(tmp_path / "venv")), where.stdout
    migrated = subprocess.run(
        [bin_dir / "python", "-m", "models.migrations"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr

    uvicorn_port, gunicorn_port = free_port(), free_port()
    uvicorn = [bin_dir / "uvicorn", "--factory", "app:create_app", "--host=127.0.0.1"]
    # The production server, with the repository's configuration (ops/ is not packaged).
    gunicorn = [bin_dir / "gunicorn", "-c", ROOT / "ops/gunicorn.conf.py", "app:create_app()"]
    gunicorn_env = {
        "BIND": f"127.0.0.1:{gunicorn_port}",
        "WEB_CONCURRENCY": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    servers = {
        "uvicorn": ([*uvicorn, f"--port={uvicorn_port}"], uvicorn_port, env),
        "gunicorn": (gunicorn, gunicorn_port, {**env, **gunicorn_env}),
    }
    with contextlib.ExitStack() as stack:
        # Both start at once: the slow part, importing everything, overlaps.
        started = {}
        for name, (command, port, server_env) in servers.items():
            log = tmp_path / f"{name}.log"
            output = stack.enter_context(log.open("w"))
            process = subprocess.Popen(
                command, cwd=workdir, env=server_env, stdout=output, stderr=subprocess.STDOUT
            )
            stack.callback(_stop, process)
            started[name] = (f"http://127.0.0.1:{port}", process, log)
        for name, (base, process, log) in started.items():
            wait_until_up(base, process, log)
            _check_serves(base, sku=f"PKG-{name.upper()}")
