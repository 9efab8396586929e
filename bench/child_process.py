"""An app in a process of its own for a bench that drives it from inside (bench/pipeline_ab.py,
bench/list_instructions.py): its code runs `python -c`, takes orders on stdin and answers on a
pipe of its own (`process.results`), its logs dropped. Under callgrind (Debian's valgrind) it
counts nothing until it switches counting on itself (`callgrind_control -i on <pid>`)."""

import os
import pathlib
import subprocess
import sys


def start(
    code: str, args: list[str], cwd: pathlib.Path, env: dict,
    callgrind_out: pathlib.Path | None = None,
) -> subprocess.Popen:  # fmt: skip
    """`code` run with `args` and, last, the number of the pipe it answers on."""
    read, write = os.pipe()
    valgrind = (
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={callgrind_out}",
        ]
        if callgrind_out
        else []
    )
    process = subprocess.Popen(  # noqa: S603 (this Python, our code)
        [*valgrind, sys.executable, "-c", code, *args, str(write)],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if callgrind_out else None,
        text=True,
        pass_fds=(write,),
    )
    os.close(write)
    process.results = os.fdopen(read)
    return process


def instructions_counted(callgrind_out: pathlib.Path) -> int:
    """The instructions a process counted, from its callgrind output's totals."""
    text = callgrind_out.read_text()
    totals = next(line for line in text.splitlines() if line.startswith("totals:"))
    return int(totals.split()[1])
