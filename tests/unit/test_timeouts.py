"""`LoopTimeout` behaves as `asyncio.timeout` does (Python 3.11 semantics), on a real event loop."""

from __future__ import annotations

import asyncio

import pytest

from gateway.pipeline.timeouts import LoopTimeout


async def _never(loop: asyncio.AbstractEventLoop) -> None:
    await loop.create_future()


def test_the_block_is_cancelled_and_raises_timeout_error_when_time_is_up() -> None:
    async def main() -> str:
        loop = asyncio.get_running_loop()
        try:
            async with LoopTimeout(loop, 0.01):
                await _never(loop)
        except TimeoutError:
            return "timed out"
        return "finished"

    assert asyncio.run(main()) == "timed out"


def test_a_block_that_ends_in_time_is_left_alone() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        async with LoopTimeout(loop, 5.0):
            await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(main()) == 0


def test_a_cancel_from_outside_stays_a_cancel() -> None:
    async def inner(loop: asyncio.AbstractEventLoop, entered: asyncio.Event) -> None:
        async with LoopTimeout(loop, 5.0):
            entered.set()
            await _never(loop)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        entered = asyncio.Event()
        task = loop.create_task(inner(loop, entered))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_it_must_run_inside_a_task() -> None:
    loop = asyncio.new_event_loop()
    try:
        entering = LoopTimeout(loop, 1.0).__aenter__()
        with pytest.raises(RuntimeError):
            entering.send(None)  # driven by hand: no task is running
    finally:
        loop.close()
