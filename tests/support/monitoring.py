"""Debian's Prometheus and Alertmanager in child processes on free ports, each run from its file
in ops/ with only addresses and intervals changed (and the alerting rules' durations shortened
by a factor, their expressions otherwise as they are)."""

import contextlib
import copy
import os
import pathlib
import re
import shutil
import subprocess

import httpx
import pytest
import yaml

from support.helpers import wait_for
from support.live import ROOT, free_port

PROMETHEUS_DIR = ROOT / "ops" / "prometheus"
ALERTMANAGER_CONFIG = ROOT / "ops" / "alertmanager" / "alertmanager.yml"
# Scrapes, rule evaluations and Alertmanager's waits in a test: a second, not 15 s or 5 minutes.
INTERVAL = "1s"


def binary(*names: str) -> str:
    """The first of `names` on PATH; skipped without, except in CI (CI=true), which fails."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    reason = f"{names[0]} is not on PATH (Debian's {names[0]} package)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the alerting end to end", pytrace=False)
    pytest.skip(reason)


def shorter_rules(rules: dict, speedup: int) -> dict:
    """`rules` (alerts.yml) with every `for:` and every range selector `speedup` times shorter:
    the same expressions over shorter windows."""

    def shorter(duration: str) -> str:
        minutes = re.fullmatch(r"(\d+)m", duration)
        assert minutes, f"a duration in whole minutes, not {duration!r}"
        return f"{int(minutes[1]) * 60 // speedup}s"

    faster = copy.deepcopy(rules)
    for group in faster["groups"]:
        for rule in group["rules"]:
            rule["expr"] = re.sub(r"\[(\w+)\]", lambda m: f"[{shorter(m[1])}]", rule["expr"])
            if "for" in rule:
                rule["for"] = shorter(rule["for"])
    return faster


def _start(command: list[str], directory: pathlib.Path) -> tuple[subprocess.Popen, pathlib.Path]:
    log = directory / "log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=directory, stdout=output, stderr=subprocess.STDOUT)
    return process, log


@contextlib.contextmanager
def _running(process: subprocess.Popen, log: pathlib.Path, url: str):
    """`url` once the process answers /-/ready there; stopped (SIGTERM) after."""
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args[0]} ended:\n{log.read_text()[-3000:]}")
            try:
                return httpx.get(f"{url}/-/ready", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, f"{process.args[0]} to be ready")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def alertmanager(directory: pathlib.Path, receiver_url: str):
    """ops/alertmanager/alertmanager.yml sending to `receiver_url` after a second's wait; its
    URL."""
    directory.mkdir()
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    route = config["route"]
    route["group_wait"] = route["group_interval"] = INTERVAL
    (webhook,) = [hook for r in config["receivers"] for hook in r.get("webhook_configs", [])]
    webhook["url"] = receiver_url
    (directory / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    command = [
        binary("prometheus-alertmanager", "alertmanager"),
        "--config.file=alertmanager.yml",
        "--storage.path=data",
        f"--web.listen-address=127.0.0.1:{port}",
        # One Alertmanager, not a cluster: no gossip port.
        "--cluster.listen-address=",
    ]
    with _running(*_start(command, directory), f"http://127.0.0.1:{port}") as url:
        yield url


class Prometheus:
    def __init__(self, url: str):
        self.url = url

    def _get(self, path: str) -> dict:
        return httpx.get(f"{self.url}{path}", timeout=30).json()["data"]

    def scrapes(self, job: str) -> bool:
        """Whether `job`'s targets were all scraped, last time, without error."""
        targets = self._get("/api/v1/targets")["activeTargets"]
        mine = [target for target in targets if target["labels"]["job"] == job]
        return bool(mine) and all(target["health"] == "up" for target in mine)

    def state(self) -> str:
        """What Prometheus makes of its targets and alerts, for a failure to show."""
        targets = [
            (t["scrapeUrl"], t["health"], t["lastError"])
            for t in self._get("/api/v1/targets")["activeTargets"]
        ]
        alerts = [
            (a["labels"]["alertname"], a["state"]) for a in self._get("/api/v1/alerts")["alerts"]
        ]
        return f"Prometheus's targets: {targets}; its alerts: {alerts}"


@contextlib.contextmanager
def prometheus(
    directory: pathlib.Path, target: str, metrics_token: str, alertmanager_url: str, speedup: int
):
    """ops/prometheus/prometheus.yml scraping `target` with `metrics_token` every second, its
    rules `speedup` times faster (shorter_rules), alerting `alertmanager_url`."""
    directory.mkdir()
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = config["global"]["evaluation_interval"] = INTERVAL
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [target]}]
    (manager,) = config["alerting"]["alertmanagers"]
    manager["static_configs"] = [{"targets": [alertmanager_url.removeprefix("http://")]}]
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    (directory / job["authorization"]["credentials_file"]).write_text(metrics_token)
    for rules in config["rule_files"]:
        faster = shorter_rules(yaml.safe_load((PROMETHEUS_DIR / rules).read_text()), speedup)
        (directory / rules).write_text(yaml.safe_dump(faster))
    port = free_port()
    command = [
        binary("prometheus"),
        "--config.file=prometheus.yml",
        "--storage.tsdb.path=data",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with _running(*_start(command, directory), f"http://127.0.0.1:{port}") as url:
        yield Prometheus(url)
