"""`bench.procstat.run_time_s`: the scheduler's run time of every thread of a process tree (the CPU figure
of `bench.ws_turns`). A child burns 0.3 s of CPU on a thread other than its main one, counted by that
thread's own CPU clock (the same sum the scheduler keeps): the figure holds at least that much."""

from __future__ import annotations

import subprocess
import sys

from bench.procstat import run_time_s

CHILD = """
import sys, threading, time
burnt = threading.Event()
def burn():
    while time.thread_time() < 0.3:
        pass
    burnt.set()
    sys.stdin.read()  # alive while the parent reads: a thread's schedstat goes with it
threading.Thread(target=burn).start()
burnt.wait()
print("burnt", flush=True)
"""


def test_the_run_time_counts_every_thread_of_the_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"burnt\n"
        assert run_time_s(proc.pid) >= 0.3
    finally:
        proc.communicate(b"", timeout=10)


def test_a_process_that_is_gone_counts_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    assert run_time_s(proc.pid) == 0.0
