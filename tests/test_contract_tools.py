"""The contracts as served (/v1/, /v2/ and /v3/openapi.json) hold up in the tools that client
developers and API designers point at them. Redocly and Spectral, with the repo's redocly.yaml and
.spectral.yaml, find nothing: no error, no warning. The TypeScript types that openapi-typescript
generates from them are usable: tests/contract_tools/client.ts, written as a client writes
against them, compiles with `tsc --strict`.

The tools are pinned in tests/contract_tools (package.json, package-lock.json); `make test` and
`make lint` install them there (`npm ci`). Without node or the installed tools the test skips,
except in CI (CI=true), where they must run.
"""

import collections
import concurrent.futures
import json
import os
import pathlib
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from app import create_app
from models.db import database, use
from shopapi.settings import Settings

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tests" / "contract_tools"
BIN = TOOLS / "node_modules" / ".bin"
CLIENT = TOOLS / "client.ts"
VERSIONS = ("v1", "v2", "v3")
# Each tool's run, on a contract of some hundred kilobytes on a small machine, is seconds; a hung
# one fails the test instead of stalling the suite.
TIMEOUT_S = 300
# No colours in what the tools print, no usage reports, no update checks.
TOOL_ENV = {
    **os.environ,
    "NO_COLOR": "1",
    "FORCE_COLOR": "0",
    "REDOCLY_TELEMETRY": "off",
    "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true",
}
# Enough lines to act on; the rest are counted by rule above them.
SHOWN_FINDINGS = 60


@dataclass
class Run:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"$ {' '.join(self.command)}\n(exit {self.returncode})\n{self.stdout}\n{self.stderr}"


@dataclass
class Finding:
    rule: str
    severity: str
    where: str
    message: str


def _unavailable(reason: str):
    # CI has node and installs the tools (`make test`), so a missing one there is a broken job.
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the contract tools", pytrace=False)
    pytest.skip(reason)


def _run(*command: str | pathlib.Path, cwd: pathlib.Path) -> Run:
    command = [str(part) for part in command]
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=TOOL_ENV,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Run(command, -1, "", f"timed out after {TIMEOUT_S} s")
    return Run(command, done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def contracts(tmp_path_factory) -> dict[str, pathlib.Path]:
    """Each version's served contract, written to a file. One app serves them all, built here
    rather than by the `anonymous` fixture, which builds one per database: the contract does not
    depend on the database (serving it opens none), and the tools take seconds a run, too long to
    run again for each backend."""
    directory = tmp_path_factory.mktemp("contract_tools")
    bound_before = database.obj
    app = create_app(Settings(database_url=f"sqlite:///{directory}/unused.db"))
    anonymous = app.test_client()
    paths = {}
    try:
        for version in VERSIONS:
            response = anonymous.get(f"/{version}/openapi.json")
            assert response.status_code == 200, response.text
            paths[version] = directory / f"{version}.json"
            paths[version].write_bytes(response.content)
    finally:
        if bound_before is not None:
            use(bound_before)  # the database the suite's shared app was using
    return paths


@pytest.fixture(scope="module")
def tools_installed():
    """Skips (fails in CI) before the app is built when the tools cannot run."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("node and npm are not installed")
    missing = [
        tool
        for tool in ("redocly", "spectral", "openapi-typescript", "tsc")
        if not (BIN / tool).exists()
    ]
    if missing:
        _unavailable(f"{', '.join(missing)} not installed in {TOOLS}: run `make contract-tools`")


@pytest.fixture(scope="module")
def tool_runs(tools_installed, contracts) -> dict[tuple[str, str], Run]:
    """Every tool's run, by (tool, version): each linter and the type generator once per
    contract, all at once (separate processes, each mostly on one core), and the compilation of
    the client with both versions' types as soon as they are generated."""
    directory = next(iter(contracts.values())).parent
    shutil.copy(CLIENT, directory / CLIENT.name)
    jobs = {}
    for version, contract in contracts.items():
        report = directory / f"{version}.spectral.json"
        jobs["redocly", version] = [BIN / "redocly", "lint", contract]
        jobs["redocly", version] += ["--config", ROOT / "redocly.yaml"]
        jobs["redocly", version] += ["--format=json", "--max-problems=100000"]
        jobs["spectral", version] = [BIN / "spectral", "lint", contract]
        jobs["spectral", version] += ["--ruleset", ROOT / ".spectral.yaml", "--fail-severity=warn"]
        jobs["spectral", version] += ["--format=json", "--output", report]
        jobs["openapi-typescript", version] = [BIN / "openapi-typescript", contract]
        jobs["openapi-typescript", version] += ["--output", directory / f"{version}.ts"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs) + 1) as pool:
        # From the contracts' directory, as a client developer runs them: openapi-typescript
        # would otherwise read the repository's redocly.yaml and its per-file lint settings.
        futures = {key: pool.submit(_run, *command, cwd=directory) for key, command in jobs.items()}
        generated = [futures["openapi-typescript", version] for version in VERSIONS]

        def compile_client() -> Run | None:
            if any(generation.result().returncode != 0 for generation in generated):
                return None  # the generator's failure is the one to report
            return _run(
                BIN / "tsc", "--strict", "--noEmit", "--pretty", "false", CLIENT.name, cwd=directory
            )

        futures["tsc", "client"] = pool.submit(compile_client)
        return {key: future.result() for key, future in futures.items()}


def _redocly_findings(run: Run) -> list[Finding]:
    report = json.loads(run.stdout)
    return [
        Finding(
            problem["ruleId"],
            problem["severity"],
            problem["location"][0]["pointer"] if problem.get("location") else "",
            problem["message"],
        )
        for problem in report["problems"]
    ]


_SPECTRAL_SEVERITIES = {0: "error", 1: "warn", 2: "info", 3: "hint"}


def _pointer(path: list) -> str:
    """A JSON pointer, as Redocly names places, for Spectral's list of keys."""
    return "#/" + "/".join(str(key).replace("~", "~0").replace("/", "~1") for key in path)


def _spectral_findings(report: pathlib.Path) -> list[Finding]:
    return [
        Finding(
            result["code"],
            _SPECTRAL_SEVERITIES[result["severity"]],
            _pointer(result["path"]),
            result["message"],
        )
        for result in json.loads(report.read_text())
    ]


def _failures(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity in ("error", "warn")]


def _summary(tool: str, version: str, failures: list[Finding], run: Run) -> str:
    """What the tool found, by rule, and its lines: for a reader of a failed run, who needs the
    rules to act on more than the hundreds of lines one construct can cause."""
    by_rule = collections.Counter((f.severity, f.rule) for f in failures)
    lines = [f"{tool} finds {len(failures)} problems in the served {version} contract:"]
    lines += [
        f"  {count:4} {severity:7} {rule}" for (severity, rule), count in by_rule.most_common()
    ]
    lines.append("")
    lines += [
        f"  {f.severity:7} {f.rule}  {f.where}  {f.message}" for f in failures[:SHOWN_FINDINGS]
    ]
    if len(failures) > SHOWN_FINDINGS:
        lines.append(f"  ... and {len(failures) - SHOWN_FINDINGS} more")
    lines += ["", f"$ {' '.join(run.command)}  (exit {run.returncode})"]
    return "\n".join(lines)


def _succeeded(run: Run, *, allowed_exits=(0,)) -> None:
    """A tool that exited as it does not after linting or generating (a crash, a refused
    argument, a timeout) fails the test with what it printed."""
    if run.returncode not in allowed_exits:
        pytest.fail(str(run), pytrace=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_redocly_finds_nothing(tool_runs, version):
    run = tool_runs["redocly", version]
    # Redocly exits 1 on errors; those are reported below with the rest.
    _succeeded(run, allowed_exits=(0, 1))
    try:
        failures = _failures(_redocly_findings(run))
    except (ValueError, KeyError):
        pytest.fail(f"Redocly's report cannot be read:\n{run}", pytrace=False)
    if failures:
        pytest.fail(_summary("Redocly", version, failures, run), pytrace=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_spectral_finds_nothing(tool_runs, contracts, version):
    run = tool_runs["spectral", version]
    # Spectral exits 1 on findings at --fail-severity or above, 2 when it could not lint.
    _succeeded(run, allowed_exits=(0, 1))
    report = contracts[version].parent / f"{version}.spectral.json"
    try:
        failures = _failures(_spectral_findings(report))
    except (ValueError, KeyError, FileNotFoundError):
        pytest.fail(f"Spectral's report cannot be read:\n{run}", pytrace=False)
    if failures:
        pytest.fail(_summary("Spectral", version, failures, run), pytrace=False)


def test_a_typescript_client_compiles_against_the_generated_types(tool_runs):
    for version in VERSIONS:
        _succeeded(tool_runs["openapi-typescript", version])
    run = tool_runs["tsc", "client"]
    if run.returncode != 0:
        pytest.fail(
            "The types openapi-typescript generates from the served contracts do not serve "
            f"{CLIENT.relative_to(ROOT)}:\n{run}",
            pytrace=False,
        )
