"""`server.sched_slice_us` against the real kernel: the slice a thread asks for is the one the kernel
reports for it (through `sched_getattr` and, where the kernel prints it, `/proc/<tid>/sched`), 0 gives
the default back, and the thread's policy and nice value are left as they were. On a kernel before 6.12
the outcome must say the slice was ignored, and the kernel must report no custom slice."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

from gateway.scheduling import Outcome, set_thread_slice, thread_slice_ns

T = TypeVar("T")


def in_fresh_thread(fn: Callable[[], T]) -> T:
    """Each test changes only a thread of its own, never the test process's main thread."""
    out: list[T] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def proc_slice_ns(tid: int) -> int | None:
    """`se.slice` from /proc (Linux 6.14+ prints it; None before): a reading that is not ours."""
    try:
        with open(f"/proc/self/task/{tid}/sched") as f:
            lines = f.readlines()
    except FileNotFoundError:  # a kernel without CONFIG_SCHED_DEBUG
        return None
    return next((int(line.split(":")[1]) for line in lines if line.startswith("se.slice")), None)


def test_a_thread_runs_with_the_slice_it_asked_for() -> None:
    default = in_fresh_thread(thread_slice_ns)

    def run() -> tuple[Outcome, str, int | None, int | None]:
        tid = threading.get_native_id()
        outcome, reason = set_thread_slice(250)
        return outcome, reason, thread_slice_ns(), proc_slice_ns(tid)

    outcome, reason, got, from_proc = in_fresh_thread(run)
    if outcome is Outcome.APPLIED:
        assert got == 250_000
        assert from_proc in (None, 250_000)
    elif outcome is Outcome.IGNORED:
        assert got == 0, "a kernel that reports a slice must have applied it"
    else:  # a sandbox that denies the call: said so, with the reason, and nothing changed
        assert outcome is Outcome.REFUSED and reason
        assert got == default


def test_zero_gives_the_kernels_default_back() -> None:
    default = in_fresh_thread(thread_slice_ns)

    def run() -> tuple[Outcome, int | None, Outcome, int | None]:
        first, _ = set_thread_slice(3000)
        changed = thread_slice_ns()
        second, _ = set_thread_slice(0)
        return first, changed, second, thread_slice_ns()

    first, changed, second, back = in_fresh_thread(run)
    if first is Outcome.APPLIED:
        assert changed == 3_000_000 != default
    assert second is (Outcome.REFUSED if first is Outcome.REFUSED else Outcome.APPLIED)
    assert back == default


def test_the_threads_policy_and_nice_value_stay() -> None:
    def run() -> tuple[int, int, int, int]:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, 7)  # a thread's own nice value (Linux: per thread)
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        set_thread_slice(500)
        return (os.getpriority(os.PRIO_PROCESS, tid), os.sched_getscheduler(0),
                os.getpriority(os.PRIO_PROCESS, os.getpid()), os.sched_getscheduler(os.getpid()))

    nice, policy, main_nice, main_policy = in_fresh_thread(run)
    assert (nice, policy) == (7, os.SCHED_BATCH)
    assert (main_nice, main_policy) == (os.getpriority(os.PRIO_PROCESS, 0), os.SCHED_OTHER)


def test_another_threads_slice_is_unchanged() -> None:
    before = thread_slice_ns()
    in_fresh_thread(lambda: set_thread_slice(100))
    assert thread_slice_ns() == before
