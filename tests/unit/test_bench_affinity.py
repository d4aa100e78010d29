"""`--pin`'s moves (bench/affinity.py) on real processes: a whole tree, or one process without its children."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.affinity import set_process_affinity, set_tree_affinity
from bench.procstat import tree


@pytest.fixture
def shell_with_a_child(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A shell that has started a `sleep` and waits for it: a process with a child, like nginx's master."""
    started = tmp_path / "started"
    # the file made by the shell itself (`: >`, no `touch`): a `touch` still exiting was once taken for the
    # child, and its /proc entry was gone before the test read it
    proc = subprocess.Popen(["sh", "-c", f"sleep 60 & : > {started}; wait"])
    try:
        while not started.exists():  # the shell forks the child before it makes the file
            if proc.poll() is not None:
                raise RuntimeError("the shell ended before its child started")
            os.sched_yield()
        yield proc
    finally:
        for pid in reversed(tree(proc.pid)):
            os.kill(pid, 9)
        proc.wait()


def _cpus_of(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}


def test_a_tree_moves_with_its_children_and_a_process_without(shell_with_a_child: subprocess.Popen[bytes]) -> None:
    cpus = os.sched_getaffinity(0)
    one = {min(cpus)}
    shell = shell_with_a_child.pid
    child = next(p for p in tree(shell) if p != shell)
    set_process_affinity(shell, one)
    assert _cpus_of(shell) == {frozenset(one)}
    assert _cpus_of(child) == {frozenset(cpus)}
    other = {max(cpus)}
    set_tree_affinity(shell, other)
    assert _cpus_of(shell) == _cpus_of(child) == {frozenset(other)}


def test_a_process_that_has_ended_is_passed_over() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: its /proc entry is gone
    assert not Path(f"/proc/{proc.pid}").exists()
    set_process_affinity(proc.pid, os.sched_getaffinity(0))
    set_tree_affinity(proc.pid, os.sched_getaffinity(0))
