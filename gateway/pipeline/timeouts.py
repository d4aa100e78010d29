"""`asyncio.timeout` for a known loop.

On CPython 3.11 every `asyncio.get_running_loop()` makes a `getpid()` system call (to notice a fork),
and `asyncio.timeout` makes three; profiles of the streaming path showed each at ~1% of a request's
CPU. The gateway runs one loop per process, so the loop is looked up once (`Upstream.loop`) and passed
here. Same semantics as `asyncio.Timeout` (Python 3.11, Lib/asyncio/timeouts.py): on expiry the task is
cancelled, and the CancelledError that results is turned into TimeoutError at the block's end unless
someone else also cancelled the task.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class LoopTimeout:
    __slots__ = ("_cancelling", "_delay", "_expired", "_handle", "_loop", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float):
        self._loop, self._delay = loop, delay_s
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expired = False
        self._cancelling = 0

    async def __aenter__(self) -> LoopTimeout:
        task = asyncio.current_task(self._loop)
        if task is None:
            raise RuntimeError("LoopTimeout should be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        self._handle = self._loop.call_later(self._delay, self._on_timeout)
        return self

    def _on_timeout(self) -> None:
        assert self._task is not None
        self._task.cancel()
        self._expired = True

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired:
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
                raise TimeoutError from exc
