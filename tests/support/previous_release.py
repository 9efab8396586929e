"""The release before this one, unpacked from git into a directory of its own: the tree as it
was just before the newest migration was added, so that deploying this release migrates it."""

import pathlib
import subprocess

from shopapi.testing.hosts import ROOT


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def newest_migration() -> pathlib.Path:
    return max((ROOT / "models" / "migrations").glob("m[0-9][0-9][0-9][0-9]_*.py"))


def previous_release(into: pathlib.Path) -> pathlib.Path:
    """The previous release's tree in `into`: the parent of the commit that added the newest
    migration (this checkout's HEAD while that migration is not committed yet)."""
    path = newest_migration().relative_to(ROOT)
    added = _git("log", "--diff-filter=A", "--format=%H", "-1", "--", str(path))
    revision = f"{added}^" if added else "HEAD"
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", revision], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into
