"""Connexion checks each contract against the OpenAPI schema whenever an app is built (about a
third of a second per spec, most of a start-up's CPU); a contract already found valid, by the
digest of its content, is not checked again: in this process, nor (like Python's __pycache__)
in another that finds its mark beside the spec files."""

import hashlib
import importlib.metadata
import pathlib

import orjson

# The check's result depends on the contract and on the schema Connexion checks it against.
_CHECKER = importlib.metadata.version("connexion")

_valid_in_process: set[str] = set()  # bounded: one digest per contract text this process built


def check_once(spec: dict, validate, marks: pathlib.Path) -> None:
    """`validate(spec)` unless this process, or another that left its mark in the directory
    `marks`, found the same contract valid with the same Connexion. A contract that fails is
    never remembered."""
    content = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    digest = hashlib.sha256(_CHECKER.encode() + b"\0" + content).hexdigest()
    if digest in _valid_in_process:
        return
    marker = marks / digest
    if not marker.exists():
        validate(spec)
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            pass  # read-only: checked again by the next process, nothing worse
    _valid_in_process.add(digest)
