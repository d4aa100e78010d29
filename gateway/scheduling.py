"""`server.sched_slice_us`: ask Linux's EEVDF scheduler for a short time slice for the event loop's thread.

Since Linux 6.12 a SCHED_OTHER thread may suggest its slice with `sched_setattr(2)`'s `sched_runtime`
(kernel commit 857b158dc5e8, "sched/eevdf: Use sched_attr::sched_runtime to set request/slice
suggestion"; clamped to 0.1-100 ms; the default is `base_slice_ns`, 0.7 ms times 1 + log2(CPUs)). A
shorter slice does not change the thread's share of the CPU, which its weight (nice) sets: it makes its
virtual deadline earlier, so that when it wakes on a core that another thread holds it runs sooner
(and is preempted sooner when it runs long). The loop's work per wake-up is short (a request's first
step, a stream's chunk), and the time it waits for a core is added to every timer, first token and
chunk of every stream it holds.

Python's `os` has no `sched_setattr`, so this calls it through libc's `syscall(2)`. It sets the calling
thread, and threads it starts afterwards inherit it. The thread's policy and nice value are read first
and written back unchanged. Kernels before 6.12 accept the call and ignore the slice; the outcome says so
by reading it back.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import os
import platform
import struct
import sys

# (sched_setattr, sched_getattr) per machine: x86_64's own table; arm64 uses the generic one
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275), "arm64": (274, 275)}
# struct sched_attr, SCHED_ATTR_SIZE_VER1 (with the utilization clamps): size, policy, flags, nice,
# priority, runtime, deadline, period, util_min, util_max
_ATTR = struct.Struct("IIQiIQQQII")
_FAIR_POLICIES = (0, 3, 5)  # SCHED_OTHER, SCHED_BATCH, SCHED_IDLE: the ones a slice applies to
_RESET_ON_FORK = 0x01


class Outcome(enum.Enum):
    APPLIED = "applied"  # read back as asked
    IGNORED = "ignored"  # accepted, not read back: a kernel before 6.12
    NOT_FAIR = "not_fair_policy"  # the thread runs a real-time policy (e.g. `chrt -f`): left alone
    UNSUPPORTED = "unsupported"  # not Linux, or a machine whose call numbers this does not know
    REFUSED = "refused"  # the call failed (e.g. a seccomp profile that denies it)


@functools.cache
def _syscall() -> tuple[ctypes.CDLL, int, int] | None:
    numbers = _SYSCALLS.get(platform.machine())
    if not sys.platform.startswith("linux") or numbers is None:
        return None
    return ctypes.CDLL(None, use_errno=True), numbers[0], numbers[1]


def _call(libc: ctypes.CDLL, nr: int, *args: object) -> None:
    if libc.syscall(nr, *args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _get(libc: ctypes.CDLL, nr: int, tid: int) -> tuple[int, ...]:
    buf = ctypes.create_string_buffer(_ATTR.size)
    _call(libc, nr, tid, buf, _ATTR.size, 0)
    return _ATTR.unpack(buf.raw)


def thread_slice_ns(tid: int = 0) -> int | None:
    """The slice a thread (0: the calling one) runs with, as the kernel reports it (`sched_runtime`);
    None where this cannot ask. Kernels before 6.12 report 0 for a SCHED_OTHER thread."""
    call = _syscall()
    if call is None:
        return None
    libc, _, get_nr = call
    return int(_get(libc, get_nr, tid)[5])


def set_thread_slice(us: int) -> tuple[Outcome, str]:
    """Suggest a slice of `us` microseconds for the calling thread (0: the kernel's default). Returns
    the outcome and, for REFUSED, the reason."""
    call = _syscall()
    if call is None:
        return Outcome.UNSUPPORTED, ""
    libc, set_nr, get_nr = call
    try:
        _, policy, flags, nice, priority, *_ = _get(libc, get_nr, 0)
        if policy not in _FAIR_POLICIES:
            return Outcome.NOT_FAIR, ""
        keep = flags & _RESET_ON_FORK  # the utilization clamps are not flagged, so left as they are
        attr = ctypes.create_string_buffer(_ATTR.pack(_ATTR.size, policy, keep, nice, priority, us * 1000,
                                                      0, 0, 0, 0), _ATTR.size)
        _call(libc, set_nr, 0, attr, 0)
        now = int(_get(libc, get_nr, 0)[5])
    except OSError as exc:
        return Outcome.REFUSED, exc.strerror or str(exc)
    return (Outcome.APPLIED if us == 0 or now == us * 1000 else Outcome.IGNORED), ""
