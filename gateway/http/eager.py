"""A request's task starts eagerly: its first step (parse, authorise, open the upstream, write the request)
runs inside the read that completed the request, not in a later iteration of the loop (issue #34).

Why: clients that go in step (S1's eight) send their next requests together, and one loop iteration reads
the whole burst. Started lazily, each request's first step waits for every read of its burst, then for
the steps ahead of it; started eagerly, each request reaches its upstream write before the next request
is read, so the median request no longer waits for the reads behind it (`bench/README.md`, "#34 point 4").
A request that waits for nothing (an error answered at once) is over before its read callback returns.

CPython 3.12 starts a task eagerly itself (`asyncio.Task(..., eager_start=True)`). On 3.11 the same is
done here: the task that will run the rest is made first, and the coroutine's first step runs now under
it (`asyncio.current_task()`, timeouts and cancellation see that task, as they do on 3.12). The task is
given `_Rest`, which hands it what that first step waits on, then gives it the coroutine's own `send` and
`throw`: a later step costs what it costs in any task.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Coroutine, Generator
from typing import Any

_FINISHED: Any = object()


def start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run `coro` up to its first wait now; the task that runs the rest, or None if that finished it (an
    error it raised is the task's, reported as any task's is). For a protocol's callbacks: inside a
    running task, the new task starts as tasks usually do, in a later iteration."""
    if asyncio.current_task(loop) is not None:
        return loop.create_task(coro)
    if sys.version_info >= (3, 12):  # spelled out, so mypy checks each branch for its own version
        task = asyncio.Task(coro, loop=loop, eager_start=True)
        return None if task.done() else task
    rest = _Rest(coro)
    context = contextvars.copy_context()
    # named: 3.11's Task formats a "Task-<n>" name for a task given none, code a request's first step
    # would run cold (issue #34); `loop.create_task` is this call when no task factory is set, as here
    task = asyncio.Task(rest, loop=loop, name="request", context=context)
    asyncio.tasks._enter_task(loop, task)  # what 3.12's eager start does
    try:
        context.run(rest.first_step)
    finally:
        asyncio.tasks._leave_task(loop, task)
    return None if rest.finished else task


class _Rest(Coroutine[Any, Any, None]):
    """A coroutine whose first step has run: to its task it is that coroutine from where it stopped. The
    task's first step takes what the coroutine waits on; from then on `send` and `throw` are the
    coroutine's own (instance attributes shadow the methods), so a later step costs no extra call."""

    def __init__(self, coro: Coroutine[Any, Any, None]):
        self._coro = coro
        self._waits_on: Any = None  # what the first step yielded (None: a bare yield), for the task
        self._error: BaseException | None = None

    def first_step(self) -> None:
        try:
            self._waits_on = self._coro.send(None)
        except StopIteration:
            self._waits_on = _FINISHED
        except BaseException as exc:  # raised by the task's first step, where the task reports it
            self._waits_on, self._error = _FINISHED, exc

    @property
    def finished(self) -> bool:
        """The first step ended the coroutine (read before the task's first step)."""
        return self._waits_on is _FINISHED

    def send(self, value: Any) -> Any:
        return self._hand_over()  # the task's first step: it waits on what the coroutine waits on

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        waits_on = self._hand_over()
        if isinstance(waits_on, asyncio.Future):  # cancelled before its task's first step: what it waits
            waits_on.cancel()  # on is cancelled too, as `Task.cancel` does to a task's waiter
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover - asyncio throws an instance

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:  # pragma: no cover - only a task drives it
        raise TypeError("a started request is driven by its task")

    def _hand_over(self) -> Any:
        waits_on, coro = self._waits_on, self._coro
        self.__dict__.update(send=coro.send, throw=coro.throw)
        if waits_on is not _FINISHED:
            return waits_on
        if self._error is not None:
            raise self._error
        raise StopIteration
