"""`--pin`: the relay under test on a CPU of its own, everything that drives it on the others.

A deployment's gateway does not share its cores with its clients and its provider; on the bench's
machine all of them run together, and a relay's event loop then waits for a core behind the load
generator and the fake upstream (bench/README.md, "#34, tenth look"). Pinning takes that wait out, so
what is left is the relay's own. Affinity is a thread's own (sched_setaffinity(2)), and a thread or
process inherits its creator's: every thread of a process tree is moved, and threads made later follow.
"""

from __future__ import annotations

import contextlib
import os

from bench.procstat import tree


def split_cpus(cpus: set[int]) -> tuple[set[int], set[int]]:
    """The relay's CPU (the last) and the others', for the clients, the load generator and the upstream."""
    if len(cpus) < 2:
        raise SystemExit("--pin needs two CPUs or more")
    last = max(cpus)
    return {last}, cpus - {last}


def set_process_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of one process, not its children (this process's children are the servers)."""
    with contextlib.suppress(FileNotFoundError):  # a process that ended since it was listed
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that ended since the listing
                os.sched_setaffinity(int(tid), cpus)


def set_tree_affinity(root: int, cpus: set[int]) -> None:
    """Every thread of `root` and of every live process below it (nginx's worker, the gateway's workers)."""
    for pid in tree(root):
        set_process_affinity(pid, cpus)
