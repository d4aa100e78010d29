"""The loop's turns (gateway/http/turns.py): a turn opens at its iteration's first unit, is spent after
its length and closes when the loop comes round; tasks that find it spent wait in a queue and are
released in the order they came, as many per iteration as the last spent turn held, after the timers
that came due; a cancelled waiter takes no one's place. Real asyncio and uvloop loops; turn lengths of
zero and of an hour make the outcomes independent of the machine's speed."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from gateway.http.turns import Turns

LOOPS: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop, uvloop.new_event_loop]


def run(make_loop: Callable[[], asyncio.AbstractEventLoop], main: Coroutine[Any, Any, Any]) -> Any:
    loop = make_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()


class Iterations:
    """Counts the loop's iterations: a zero-delay timer re-armed from itself fires once per iteration,
    in its timer phase, before the iteration's ready callbacks (uvloop: libuv runs timers first)."""

    def __init__(self) -> None:
        self.n = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(0, self._tick)

    def _tick(self) -> None:
        self.n += 1
        self._handle = self._loop.call_later(0, self._tick)

    def stop(self) -> None:
        self._handle.cancel()


async def unit(turns: Turns, name: str, log: list[tuple[str, int]], its: Iterations) -> None:
    loop = asyncio.get_running_loop()
    if turns.over(loop):
        await turns.wait(loop)
    log.append((name, its.n))


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_turn_is_open_until_spent_and_closes_when_the_loop_comes_round(make_loop: Any) -> None:
    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        spent, endless = Turns(turn_s=0.0), Turns(turn_s=3600.0)
        seen = [spent.over(loop), spent.over(loop), endless.over(loop), endless.over(loop)]
        await asyncio.sleep(0)
        return [*seen, spent.over(loop)]  # the loop came round: a new turn, not spent yet

    assert run(make_loop, main()) == [False, True, False, False, False]


def test_waiters_run_in_order_one_turn_each_after_the_timers() -> None:
    """Four units ready together, turns that hold one unit: the first runs at once, the others each in a
    later iteration than the one before, in the order they came; the iteration counter's timer (due
    every iteration) is never held back by them."""
    turns, log = Turns(turn_s=0.0), list[tuple[str, int]]()

    async def main() -> None:
        its = Iterations()
        await asyncio.sleep(0)  # past the first iteration: the counter runs
        await asyncio.gather(*(unit(turns, name, log, its) for name in "abcd"))
        its.stop()

    run(uvloop.new_event_loop, main())
    assert [name for name, _ in log] == ["a", "b", "c", "d"]
    ran_in = [n for _, n in log]
    assert all(later > earlier for earlier, later in itertools.pairwise(ran_in)), ran_in


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_cancelled_waiter_takes_no_ones_place(make_loop: Any) -> None:
    turns, log = Turns(turn_s=0.0), list[tuple[str, int]]()

    async def main() -> None:
        its = Iterations()
        first = asyncio.ensure_future(unit(turns, "a", log, its))
        gone = asyncio.ensure_future(unit(turns, "gone", log, its))
        last = asyncio.ensure_future(unit(turns, "c", log, its))
        await asyncio.sleep(0)  # all three have started: "a" ran, the other two wait
        gone.cancel()
        await asyncio.wait_for(asyncio.gather(first, last), timeout=5)
        its.stop()

    run(make_loop, main())
    assert [name for name, _ in log] == ["a", "c"]


def test_turns_with_time_to_spare_release_more_waiters_each_time() -> None:
    """Five waiters and turns that are never spent: the count released doubles once a released one has run
    and fit (a close runs ahead of the waiters it released last): one, one, two, then the last."""
    turns, log = Turns(turn_s=3600.0), list[tuple[str, int]]()

    async def waiter(name: str, its: Iterations) -> None:
        await turns.wait(asyncio.get_running_loop())
        log.append((name, its.n))

    async def main() -> None:
        its = Iterations()
        await asyncio.sleep(0)
        await asyncio.gather(*(waiter(name, its) for name in "abcde"))
        its.stop()

    run(uvloop.new_event_loop, main())
    assert [name for name, _ in log] == list("abcde")
    ran_in = [n for _, n in log]
    first = ran_in[0]
    assert ran_in == [first, first + 1, first + 2, first + 2, first + 3]


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_close_left_due_by_a_stopped_loop_does_not_strand_the_next_loops_waiters(make_loop: Any) -> None:
    """A loop stops right after a turn opened on it, its closing callback unrun; on the next loop a task
    that finds the turn spent is still released (it would wait forever for the dead loop's close)."""
    turns = Turns(turn_s=0.0)
    first = make_loop()
    first.call_soon(turns.over, first)
    first.call_soon(first.stop)
    first.run_forever()  # the close that `over` scheduled comes after the stop: it never runs
    first.close()

    async def main() -> str:
        loop = asyncio.get_running_loop()
        if turns.over(loop):
            await asyncio.wait_for(turns.wait(loop), timeout=5)
        return "released"

    assert run(make_loop, main()) == "released"


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_length_of_zero_set_from_config_turns_the_limit_off(make_loop: Any) -> None:
    """`server.loop_turn_ms: 0`: no turn is ever spent (where a turn made with length 0 is spent at once)."""
    async def main() -> list[bool]:
        off = Turns(turn_s=0.0)
        off.set_length(0.0)
        return [off.over(asyncio.get_running_loop()) for _ in range(3)]

    assert run(make_loop, main()) == [False, False, False]


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_turn_older_than_stale_is_a_new_turn_not_a_spent_one(make_loop: Any) -> None:
    """A loop that stopped before its turn's closing callback ran leaves the turn open; whoever checks
    after `stale_s` gets a new turn, not a spent one (with stale_s of an hour, the same check is spent)."""
    async def main() -> list[bool]:
        stale, fresh = Turns(turn_s=0.0, stale_s=0.0), Turns(turn_s=0.0, stale_s=3600.0)
        loop = asyncio.get_running_loop()
        return [stale.over(loop), stale.over(loop), fresh.over(loop), fresh.over(loop)]

    assert run(make_loop, main()) == [False, False, False, True]


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_backlog_is_a_spent_turn_or_a_unit_still_waiting(make_loop: Any) -> None:
    """What a new request asks before it starts eagerly (gateway/http/connection.py): a fresh turn with a
    unit still queued from an earlier one is a backlog too, though no turn is spent."""
    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        turns = Turns(turn_s=0.0)
        seen = [turns.backlog]

        async def waiter() -> None:
            await turns.wait(loop)
            seen.append(turns.backlog)

        queued = [loop.create_task(waiter()) for _ in range(3)]
        await asyncio.sleep(0)  # both wait in the queue
        turns.over(loop)
        turns.over(loop)  # this iteration's turn is spent by its first unit: each close releases one waiter
        turns.set_length(3600.0)  # the turns that follow are not spent: only the queue is left
        seen.append(turns.backlog)
        await asyncio.gather(*queued)
        return seen

    seen = run(make_loop, main())
    assert seen[:3] == [False, True, True]  # the first released sees the third still queued
    assert seen[-1] is False  # the last released: nothing waits, nothing is spent
