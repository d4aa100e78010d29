"""The spend ledger's group commit: one row per answered request, committed before its last byte.

`record` queues the row and waits for the commit that carries it. The first row queued after a commit
schedules the next one, due `COMMIT_EVERY_S` after the previous commit began (the next loop iteration
when that is past), and that commit carries every row queued until then: under load commits come every
`COMMIT_EVERY_S` and each carries every request that ended in between (a loop iteration under load runs
many requests to their end: S2 on a busy 2-core machine averaged 23-25 rows a commit), so a commit's fixed cost (a
lock, a WAL append, a round trip: 20-100 µs) is shared by all of them. An idle ledger (nothing queued,
the last commit `COMMIT_EVERY_S` ago or more: the row would be committed alone anyway) commits the row
right there in `record`, which then returns without suspending its request: no wake-up, no loop
iteration between the row and its last byte. Where the driver can commit without waiting (SQLite's file,
its write lock free) the commit runs on the loop: no thread, no lock hand-over, no wake-up (a thread per
commit cost the request path more than the commit itself). Otherwise (PostgreSQL, a busy SQLite file) one
task commits a batch at a time on the driver's async path, and rows queued meanwhile go in its next batch.

The requests of one batch wait on one future (not one each), and waiting is bounded per batch: one
timer, armed by the first waiter after a commit, releases every waiting request `wait_s` later if no
commit came first (a hung store).

Rows have the gateway's own unique id, so a batch retried after an unclear failure is never counted
twice. Store down: the rows stay queued in memory (bounded) and are retried; requests stop waiting for
them (serving goes on), an error is counted and the store reports itself down until a commit succeeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import monotonic

import structlog

from gateway.store.store import Store
from gateway.store.types import SpendRow, StoreUnavailable

log = structlog.get_logger("gateway")
MAX_BATCH = 1000
MAX_BACKLOG = 100_000
RETRY_S = 0.5
COMMIT_EVERY_S = 0.002  # under load, a commit at most this often

Entry = tuple[SpendRow, "asyncio.Future[None] | None"]  # the future its request waits on (shared by a batch)


class SpendLedger:
    def __init__(self, store: Store, wait_s: float, on_error: Callable[[], None],
                 commit_every_s: float = COMMIT_EVERY_S):
        self._store, self._wait_s, self._on_error = store, wait_s, on_error
        self._every = commit_every_s
        self._queue: list[Entry] = []  # not committed yet, oldest first
        self._waiters: asyncio.Future[None] | None = None  # what rows queued since the last commit wait on
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False  # `_due` is pending (call_soon or call_later)
        self._writer: asyncio.Task[None] | None = None  # commits on the driver's async path, retries
        self._deadline: asyncio.TimerHandle | None = None
        # monotonic(), not loop.time(): uvloop's is read once per loop iteration, and `record` times
        # commits within one
        self._last_commit = float("-inf")
        self._armed = float("-inf")  # when the pending `_due` was scheduled
        self._in_place = False  # the last commit was an idle ledger's, made in `record`
        self._closed = False
        self.failing = False
        self.dropped = 0
        self.commits = 0  # batches committed

    def start(self) -> None:
        # kept: asyncio.get_running_loop() costs a getpid() system call each time (CPython's fork check)
        self._loop = asyncio.get_running_loop()

    async def record(self, row: SpendRow) -> None:
        """Returns once the row is committed, or at once while the store is failing (the row is kept
        and retried), or after `wait_s` at most."""
        loop = self._loop
        if self.failing or self._closed or loop is None:
            self._queue.append((row, None))
            return
        fut = self._waiters
        if fut is None:  # the first row since the last commit
            fut = self._waiters = loop.create_future()
        queue = self._queue
        idle = not queue
        queue.append((row, fut))
        if self._writer is None:
            if idle and monotonic() - self._last_commit >= self._every:
                self._commit(in_place=True)  # alone either way: committed here, the request goes on at once
            elif not self._scheduled:
                self._schedule(loop)
        if not fut.done():
            if self._deadline is None:
                self._deadline = loop.call_later(self._wait_s, self._expire)
            await fut

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        """The commit at its time if no request ending commits first."""
        self._scheduled = True
        self._armed = now = monotonic()
        # after a row committed in place, the rows of the same burst go at the next iteration, as they
        # would have with it: not a commit interval later
        wait = 0.0 if self._in_place else self._last_commit + self._every - now
        if wait <= 0:
            loop.call_soon(self._due)
        else:
            loop.call_later(wait, self._due)

    def _due(self) -> None:
        self._scheduled = False
        if self._last_commit < self._armed:
            self._commit()
        elif self._queue and self._writer is None and self._loop is not None:
            self._schedule(self._loop)  # committed since it was scheduled: the next commit at its own time

    def _commit(self, in_place: bool = False) -> None:
        """On the loop: commit a batch where the driver needs no wait, else hand the queue to the writer."""
        loop = self._loop
        if not self._queue or self._writer is not None or self._closed or loop is None:
            return
        self._last_commit = monotonic()
        self._in_place = in_place
        self._waiters = None  # rows queued from now on wait for the next commit
        batch = self._queue[:MAX_BATCH]
        try:
            done = self._store.record_spend_now([row for row, _ in batch])
        except StoreUnavailable as exc:
            self._failed(batch, exc)
            done = False
        if not done:
            self._writer = loop.create_task(self._write(), name="spend-ledger")
            return
        self._committed(batch)
        if self._queue and not self._scheduled:
            self._schedule(loop)

    async def _write(self) -> None:
        try:
            while self._queue and not (self._closed and self.failing):
                if self.failing:
                    await asyncio.sleep(RETRY_S)
                await self.flush()
                if self._queue and not self.failing:  # queued during that commit: the next at its time
                    await asyncio.sleep(max(0.0, self._last_commit + self._every - monotonic()))
        finally:
            self._writer = None

    async def flush(self) -> None:
        """Commit what is queued, a batch at a time, on the driver's async path; on a failure the rows
        stay queued (bounded)."""
        while self._queue:
            batch = self._queue[:MAX_BATCH]
            self._last_commit = monotonic()
            self._in_place = False
            self._waiters = None
            try:
                await self._store.record_spend([row for row, _ in batch])
            except StoreUnavailable as exc:
                self._failed(batch, exc)
                return
            self._committed(batch)

    def _committed(self, batch: list[Entry]) -> None:
        self.commits += 1
        del self._queue[:len(batch)]
        if self.failing:
            self.failing = False
            log.info("ledger_recovered")
        # a future shared with rows still queued (a batch cut at MAX_BATCH) waits for their commit
        _release(batch, self._queue[0][1] if self._queue else None)
        if self._deadline is not None:  # the store answers: the next waiter starts a new wait
            self._deadline.cancel()
            self._deadline = None
            if self._queue and self._loop is not None:  # rows queued meanwhile: their own bound
                self._deadline = self._loop.call_later(self._wait_s, self._expire)

    def _failed(self, batch: list[Entry], exc: StoreUnavailable) -> None:
        self._on_error()
        if not self.failing:
            self.failing = True
            log.warning("ledger_unavailable", reason=str(exc), queued=len(self._queue),
                        message="spend rows are kept in memory and retried")
        _release(batch)  # the requests go on; their rows stay queued
        over = len(self._queue) - MAX_BACKLOG
        if over > 0:
            self.dropped += over
            del self._queue[:over]
            log.error("ledger_rows_dropped", count=over)

    def _expire(self) -> None:
        """`wait_s` since the first waiter and no commit since: stop every request waiting."""
        self._deadline = None
        self._waiters = None  # the next rows wait again, under a timer of their own
        _release(self._queue)

    async def close(self) -> None:
        """Let the commit in flight end (never cancelled: its driver call would go on without us), then
        commit what is left; a failing store is tried once more, not retried."""
        self._closed = True
        if self._writer is not None:
            await asyncio.wait([self._writer])
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        await self.flush()  # a drained shutdown loses nothing the store can take
        _release(self._queue)


def _release(batch: list[Entry], keep: asyncio.Future[None] | None = None) -> None:
    """Wake the requests waiting on `batch`'s rows: one future per batch of waiters, in a run."""
    last = None
    for _, fut in batch:
        if fut is not last and fut is not None and fut is not keep and not fut.done():
            fut.set_result(None)
        last = fut
