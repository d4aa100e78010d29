"""Sharing the event loop's turn among requests, so that no loop iteration runs long (issue #34).

One iteration of the loop runs every callback that is ready: under saturation (128 streams whose
upstreams all have data) that is every stream's next read and every new request's first step (parse,
authorise, open its upstream). Each is short; together they made one iteration last 10-60 ms, and every
timer and every other stream on the loop waited that long: a new request's first token too.

So the work of one iteration is cut into turns of `TURN_S`. A task asks `TURNS.over(loop)` before a
unit of work that starts a step (a request's first step; a stream's step woken by upstream bytes). While
the turn has time left that costs one clock read. Once it is spent the task queues (`await
TURNS.wait(loop)`). The waiting tasks are released in the order they came, a turn's worth per iteration (as
many units as the last spent turn ran), each batch into a later iteration than the last and ahead of the
tasks that bytes woke meanwhile; what came due in between (timers, reads, the other streams' writes) runs
first. A released task that finds the turn spent after all goes back to the head of the queue.

Why a queue rather than a bare yield per waiting task: with 100 tasks waiting, resuming every one of
them each iteration only to yield again cost 8% of the CPU under S2's load.

A turn opens at its iteration's first unit and closes when the loop comes round (one `call_soon` per busy
iteration). A turn older than `STALE_S` is taken as over-and-done rather than still running (a loop
that stopped with its closing callback unrun, as at the end of a test).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

TURN_S = 0.002  # the most one iteration's units run before the rest wait for a later one
STALE_S = 1.0
MAX_FITS = 4096


class Turns:
    __slots__ = ("_admitted", "_close_loop", "_fits", "_returned", "_spent", "_stale_s", "_start", "_turn_s",
                 "_waiting")

    def __init__(self, turn_s: float = TURN_S, stale_s: float = STALE_S) -> None:
        self._turn_s, self._stale_s = turn_s, stale_s
        self._start = 0.0  # 0: no turn is open
        self._admitted = 0  # units begun in the open turn
        self._spent = False  # a unit found the open turn spent
        self._fits = 1  # units the last spent turn held: how many waiters one iteration releases
        self._close_loop: asyncio.AbstractEventLoop | None = None  # where a `_close` is due, if one is
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._returned: list[asyncio.Future[None]] = []  # released, found the turn spent: first next time

    def set_length(self, turn_s: float) -> None:
        """The configured turn (`server.loop_turn_ms`); 0 turns the limit off: no turn is ever spent."""
        self._turn_s = turn_s if turn_s > 0 else math.inf

    @property
    def backlog(self) -> bool:
        """Units wait for a turn, or the open one is spent: the loop is saturated. A new request then
        starts behind them (`connection.py`), not ahead of the streams' steps."""
        return self._spent or bool(self._waiting) or bool(self._returned)

    def over(self, loop: asyncio.AbstractEventLoop) -> bool:
        """True when this iteration's turn is spent: the caller waits (`wait`) before its unit. `loop` is
        the running loop, which the caller knows: on CPython 3.11 looking it up is a `getpid` system
        call (see `gateway/pipeline/timeouts.py`), and below saturation every unit opens a turn."""
        return not self._admit(time.perf_counter(), loop)

    async def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue behind the tasks already waiting, until released into a turn with time left."""
        waiter = loop.create_future()
        self._waiting.append(waiter)
        self._close_on(loop)  # asked without a spent turn, a close is still what releases it
        while True:
            await waiter
            if self._admit(time.perf_counter(), loop):
                return
            waiter = loop.create_future()  # released one too many: back to the head of the queue
            self._returned.append(waiter)

    def _admit(self, now: float, loop: asyncio.AbstractEventLoop) -> bool:
        start = self._start
        if not start or now - start >= self._stale_s:
            self._start, self._admitted, self._spent = now, 0, False
            self._close_on(loop)
        elif now - start >= self._turn_s:
            if not self._spent:
                self._spent, self._fits = True, max(1, min(self._admitted, MAX_FITS))
            return False
        self._admitted += 1
        return True

    def _close_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """A close on this loop, unless one is due there already (one due on a loop that has stopped, as
        at the end of a test, never runs: this loop gets its own)."""
        if self._close_loop is not loop:
            self._close_loop = loop
            loop.call_soon(self._close, loop)

    def _close(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop came round: the turn ends and the next waiters are released. Their wake-ups run in the
        next iteration, behind this callback again while any still wait."""
        self._close_loop = None
        waiting = self._waiting
        if not self._spent and self._admitted and waiting:  # they all fit, with time to spare
            self._fits = min(2 * self._fits, MAX_FITS)
        self._start = 0.0
        if self._returned:
            waiting.extendleft(reversed(self._returned))
            self._returned.clear()
        if not waiting:
            return
        self._close_on(loop)
        released = 0
        while waiting and released < self._fits:
            if _release(waiting.popleft(), loop):
                released += 1


def _release(waiter: asyncio.Future[None], running: asyncio.AbstractEventLoop) -> bool:
    """Wake a waiting task: on its own loop (tests run loops in threads side by side), unless it was
    cancelled or its loop has closed."""
    if waiter.done():
        return False
    loop = waiter.get_loop()
    if loop is running:
        waiter.set_result(None)
        return True
    try:
        loop.call_soon_threadsafe(_wake, waiter)
    except RuntimeError:  # its loop is closed: nobody waits on it any more
        return False
    return True


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


TURNS = Turns()  # one per process: one event loop serves it (workers are processes)
