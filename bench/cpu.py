"""CPU time of processes, read from /proc: what a benchmark charges to each server.

A process's `utime + stime` covers all its threads; `cutime + cstime` what its children used
before they exited and were reaped (PostgreSQL backends that end mid-run, say). Summed over a
process tree, or over every process of one program, the difference between two readings is the
CPU the program used in between.
"""

import os
import pathlib

TICK_SECONDS = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, int, float, float] | None:
    """(command, parent pid, CPU seconds incl. reaped children, of which in the kernel) of `pid`,
    None if it is gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command is in parentheses and may hold spaces; the fields after it are numbered
    # from 3 (state) in proc(5).
    command = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    parent = int(fields[1])
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return (
        command,
        parent,
        (utime + stime + cutime + cstime) * TICK_SECONDS,
        (stime + cstime) * TICK_SECONDS,
    )


def _all() -> dict[int, tuple[str, int, float, float]]:
    stats = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    return stats


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    return [child for child, (_, parent, *_) in _all().items() if parent == pid]


def tree_seconds(root: int, kernel: bool = False) -> float:
    """CPU seconds used so far by process `root` and all its descendants (`kernel`: of those, the
    seconds spent in the kernel on their behalf: system calls, network, page faults)."""
    return trees_seconds({"tree": [root]}, kernel)["tree"]


def trees_seconds(groups: dict[str, list[int]], kernel: bool = False) -> dict[str, float]:
    """For each named group of process trees (their roots' pids), the CPU seconds its processes
    used so far (`kernel`: in the kernel), all from one reading of /proc."""
    stats = _all()
    part = 3 if kernel else 2
    children: dict[int, list[int]] = {}
    for pid, (_, parent, *_) in stats.items():
        children.setdefault(parent, []).append(pid)
    totals = {}
    for name, roots in groups.items():
        total, todo = 0.0, list(roots)
        while todo:
            pid = todo.pop()
            if pid in stats:
                total += stats[pid][part]
            todo += children.get(pid, [])
        totals[name] = total
    return totals


def program_seconds(command: str) -> float:
    """CPU seconds used so far by every process whose command is `command` (e.g. postgres)."""
    return sum(seconds for name, _, seconds, _ in _all().values() if name == command)
