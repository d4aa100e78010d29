"""A request's task started eagerly (gateway/http/eager.py): its first step runs inside the callback that
starts it, under the task that runs the rest; a coroutine over in its first step leaves nothing to run;
a cancel before the task's first step reaches the coroutine where it waits; the steps share one context
of their own. Real asyncio and uvloop loops, on whichever CPython runs the tests (3.11: our start; 3.12+:
the standard library's `eager_start`)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
from collections.abc import Callable
from typing import Any

import pytest

from gateway.http.eager import start_eagerly
from tests.unit.test_turns import LOOPS, run

TAG: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="caller")


def from_callback(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> asyncio.Future[Any]:
    """`fn` run as a protocol's callback runs: by the loop, outside any task."""
    got: asyncio.Future[Any] = loop.create_future()
    loop.call_soon(lambda: got.set_result(fn()))
    return got


@pytest.mark.parametrize("make_loop", LOOPS)
def test_the_first_step_runs_before_start_returns_under_the_task_that_runs_the_rest(make_loop: Any) -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        log: list[Any] = []
        wake: asyncio.Future[int] = loop.create_future()

        async def request() -> None:
            log.append(("first", asyncio.current_task()))
            log.append(("then", await wake, asyncio.current_task()))

        def callback() -> asyncio.Task[None] | None:
            task = start_eagerly(loop, request())
            log.append("returned")
            return task

        task = await from_callback(loop, callback)
        assert task is not None and not task.done()
        wake.set_result(7)
        await task
        return [log[0][0], log[0][1] is task, log[1], log[2][:2], log[2][2] is task]

    assert run(make_loop, main()) == ["first", True, "returned", ("then", 7), True]


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_coroutine_over_in_its_first_step_leaves_no_task_and_runs_once(make_loop: Any) -> None:
    async def main() -> tuple[Any, int, Any, list[Any]]:
        loop = asyncio.get_running_loop()
        runs = 0

        async def answered_at_once() -> None:
            nonlocal runs
            runs += 1

        async def fails_at_once() -> None:
            raise ValueError("refused")

        handler_calls: list[Any] = []
        loop.set_exception_handler(lambda _loop, context: handler_calls.append(context.get("exception")))
        task = await from_callback(loop, lambda: start_eagerly(loop, answered_at_once()))
        failed = await from_callback(loop, lambda: start_eagerly(loop, fails_at_once()))
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()  # a task whose error nobody retrieved reports it when it is freed
        return task, runs, failed, handler_calls

    task, runs, failed, reported = run(make_loop, main())
    assert task is None and runs == 1
    assert failed is None  # `start_eagerly` itself raised nothing: the error is the task's, reported as any
    assert [type(e) for e in reported] == [ValueError]  # task's is


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_cancel_before_the_tasks_first_step_reaches_the_coroutine_where_it_waits(make_loop: Any) -> None:
    async def main() -> tuple[list[str], bool, bool]:
        loop = asyncio.get_running_loop()
        log: list[str] = []
        upstream: asyncio.Future[None] = loop.create_future()

        async def request() -> None:
            try:
                await upstream
            except asyncio.CancelledError:
                log.append("cancelled where it waited")
                raise

        def callback() -> asyncio.Task[None] | None:
            task = start_eagerly(loop, request())
            assert task is not None
            task.cancel()  # as a client gone in the same iteration cancels its handler
            return task

        task = await from_callback(loop, callback)
        with pytest.raises(asyncio.CancelledError):
            await task
        return log, task.cancelled(), upstream.cancelled()

    assert run(make_loop, main()) == (["cancelled where it waited"], True, True)


@pytest.mark.parametrize("make_loop", LOOPS)
def test_every_step_runs_in_one_context_of_its_own(make_loop: Any) -> None:
    async def main() -> tuple[list[str], str]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []

        async def request() -> None:
            TAG.set("request")
            await asyncio.sleep(0)
            seen.append(TAG.get())
            await asyncio.sleep(0)
            seen.append(TAG.get())

        def callback() -> tuple[asyncio.Task[None] | None, str]:
            task = start_eagerly(loop, request())
            return task, TAG.get()  # the callback's own context is untouched by the first step

        task, callers = await from_callback(loop, callback)
        assert task is not None
        await task
        return seen, callers

    assert run(make_loop, main()) == (["request", "request"], "caller")


@pytest.mark.parametrize("make_loop", LOOPS)
def test_inside_a_running_task_the_new_task_starts_in_a_later_iteration(make_loop: Any) -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        log: list[str] = []

        async def request() -> None:
            log.append("request's first step")

        task = start_eagerly(loop, request())
        log.append("returned")
        assert task is not None
        await task
        return log

    assert run(make_loop, main()) == ["returned", "request's first step"]
