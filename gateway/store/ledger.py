"""The spend ledger's group commit: one row per answered request, committed before its last byte.

`record` queues the row and waits for the commit that carries it. The first row queued after a commit
schedules the next one, due `COMMIT_EVERY_S` after the previous commit began (at once when that is
past), and that commit carries every row queued until then: an idle gateway commits a single row at
once; under load commits come every `COMMIT_EVERY_S` and each carries every request that ended in
between, so a commit's fixed cost (a round trip, a lock, a WAL append: 30-100 µs) is shared by all of
them and the cost per request stays a few µs, while the wait it adds is at most `COMMIT_EVERY_S`. Where the driver can
commit without waiting (SQLite's file, its write lock free) the commit runs right there on the loop: no
thread, no lock hand-over, no wake-up (a thread per commit cost the request path more than the commit
itself: its GIL hand-overs and wake-ups). Otherwise (PostgreSQL, a busy SQLite file) one task commits
a batch at a time on the driver's async path, and rows queued meanwhile go in its next batch.

The requests of one batch wait on one future, not one each. Waiting is bounded per batch, not per
request: one timer, armed by the first waiter after a commit, releases every waiting request `wait_s`
later if no commit came first (a hung store); the requests after it wait again, under a timer of their own.

Measured (S2 on a shared 2-core machine, bench/README.md): the commit is a third to a half of what
the ledger costs a request, the rest is the wait (the request suspended, its last write a loop iteration
or two later). Committing in `record` when the ledger was idle, to spare that request the wait, was tried
and dropped: under load the gateway's pauses make the ledger look idle at half of its commits, which
then carried 15 rows instead of 26 and cost more than the waits they spared.

Rows have the gateway's own unique id, so a batch retried after an unclear failure is never counted
twice. Store down: the rows stay queued in memory (bounded) and are retried; requests stop waiting for
them (serving goes on), an error is counted and the store reports itself down until a commit succeeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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
        self._scheduled = False  # `_commit` is due (call_soon or call_at)
        self._writer: asyncio.Task[None] | None = None  # commits on the driver's async path, retries
        self._deadline: asyncio.TimerHandle | None = None
        self._last_commit = float("-inf")  # loop time the last commit began
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
        self._queue.append((row, fut))
        if self._deadline is None:
            self._deadline = loop.call_later(self._wait_s, self._expire)
        if not self._scheduled and self._writer is None:
            self._schedule(loop)
        await fut

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = True
        due = self._last_commit + self._every
        if loop.time() >= due:
            loop.call_soon(self._commit)
        else:
            loop.call_at(due, self._commit)

    def _commit(self) -> None:
        """On the loop: commit a batch where the driver needs no wait, else hand the queue to the writer."""
        self._scheduled = False
        loop = self._loop
        if not self._queue or self._writer is not None or self._closed or loop is None:
            return
        self._last_commit = loop.time()
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
        if self._queue:
            self._schedule(loop)

    async def _write(self) -> None:
        try:
            while self._queue and not (self._closed and self.failing):
                if self.failing:
                    await asyncio.sleep(RETRY_S)
                await self.flush()
                if self._queue and not self.failing:  # queued during that commit: the next at its time
                    await asyncio.sleep(max(0.0, self._last_commit + self._every - self._now()))
        finally:
            self._writer = None

    async def flush(self) -> None:
        """Commit what is queued, a batch at a time, on the driver's async path; on a failure the rows
        stay queued (bounded)."""
        while self._queue:
            batch = self._queue[:MAX_BATCH]
            self._last_commit = self._now()
            self._waiters = None
            try:
                await self._store.record_spend([row for row, _ in batch])
            except StoreUnavailable as exc:
                self._failed(batch, exc)
                return
            self._committed(batch)

    def _now(self) -> float:
        return self._loop.time() if self._loop is not None else float("-inf")

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
    """Wake the requests waiting on `batch`'s rows: their futures come in runs, one per batch of waiters."""
    last = None
    for _, fut in batch:
        if fut is not last and fut is not None and fut is not keep and not fut.done():
            fut.set_result(None)
        last = fut
