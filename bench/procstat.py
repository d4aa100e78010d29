"""CPU time and memory of a server process and every live process below it, read from /proc.

CPU is utime+stime from /proc/<pid>/stat (clock ticks; the process's own threads included). A dead
child's time would only show in cutime once waited for, so the whole live tree is summed instead: the
gateway's `--workers` children, nginx's workers. Memory is VmRSS (now) and VmHWM (peak since the process
started) from /proc/<pid>/status, summed over the tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_s: float
    rss_kib: int
    hwm_kib: int
    procs: int


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read().decode()
    # the command name (field 2) may contain spaces and parentheses: split after its closing one
    return raw[raw.rindex(")") + 2:].split()


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(name))[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        out.setdefault(ppid, []).append(int(name))
    return out


def tree(pid: int) -> list[int]:
    kids = _children()
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(kids.get(p, ()))
    return found


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def run_time_s(pid: int) -> float:
    """The time every live thread of `pid` and of the live processes below it has run on a CPU, in
    nanoseconds summed by the scheduler (the first field of /proc/<pid>/task/<tid>/schedstat), where
    utime+stime comes in clock ticks (10 ms): a few hundred milliseconds then compare fairly. A thread
    that has ended is not counted (the servers' threads live as long as they do)."""
    total = 0
    for p in tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def _cpu_ticks(fields: list[str]) -> tuple[int, int]:
    """utime and stime from a stat line's fields after the name: state(0) ppid(1) ... utime(11) stime(12),
    i.e. fields 14 and 15 of stat(5)."""
    return int(fields[11]), int(fields[12])


def user_sys_s(pid: int) -> tuple[float, float]:
    """utime and stime of `pid` and the live processes below it, apart, in seconds (clock ticks: compare
    over seconds of load, not milliseconds)."""
    user = system = 0
    for p in tree(pid):
        try:
            u, s = _cpu_ticks(_stat_fields(p))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        user, system = user + u, system + s
    return user / _TICK, system / _TICK


def usage(pid: int) -> Usage:
    cpu, rss, hwm, n = 0.0, 0, 0, 0
    for p in tree(pid):
        try:
            cpu += sum(_cpu_ticks(_stat_fields(p))) / _TICK
            rss += _status_kib(p, "VmRSS:")
            hwm += _status_kib(p, "VmHWM:")
            n += 1
        except (OSError, ValueError, IndexError):
            continue
    return Usage(cpu, rss, hwm, n)
