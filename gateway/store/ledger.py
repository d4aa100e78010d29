"""The spend ledger's group commit: one row per answered request, committed before its last byte.

`record` queues the row and waits for the transaction that carries it. One writer task commits whatever
has queued while the previous commit ran, so under load a commit carries many requests (a few ms each)
and an idle gateway commits a single row at once. Rows have the gateway's own unique id, so a batch that
is retried after an unclear failure is never counted twice.

Store down: the rows stay queued in memory (bounded) and are retried; requests stop waiting for them
(serving goes on), an error is counted and the store reports itself down until a commit succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from gateway.store.store import Store
from gateway.store.types import SpendRow, StoreUnavailable

log = structlog.get_logger("gateway")
MAX_BATCH = 1000
MAX_BACKLOG = 100_000
RETRY_S = 0.5


class SpendLedger:
    def __init__(self, store: Store, wait_s: float, on_error: Callable[[], None]):
        self._store, self._wait_s, self._on_error = store, wait_s, on_error
        self._queue: list[tuple[SpendRow, asyncio.Future[None] | None]] = []
        self._wake = asyncio.Event()
        self.failing = False
        self.dropped = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="spend-ledger")

    async def record(self, row: SpendRow) -> None:
        """Returns once the row is committed, or at once while the store is failing (the row is kept
        and retried), or after `wait_s` at most."""
        if self.failing:
            self._queue.append((row, None))
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._queue.append((row, fut))
        self._wake.set()
        timer = loop.call_later(self._wait_s, _resolve, fut)  # a slow store: stop waiting
        try:
            await fut
        finally:
            timer.cancel()

    async def _run(self) -> None:
        while True:
            if not self._queue:
                await self._wake.wait()
            self._wake.clear()
            await self.flush()
            if self.failing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), RETRY_S)

    async def flush(self) -> None:
        """Commit what is queued, a batch at a time; on failure keep it queued (bounded)."""
        while self._queue:
            batch = self._queue[:MAX_BATCH]
            try:
                await self._store.record_spend([row for row, _ in batch])
            except StoreUnavailable as exc:
                self._failed(batch, exc)
                return
            del self._queue[:len(batch)]
            if self.failing:
                self.failing = False
                log.info("ledger_recovered")
            _release(batch)

    def _failed(self, batch: list[tuple[SpendRow, asyncio.Future[None] | None]], exc: StoreUnavailable) -> None:
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

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()  # a drained shutdown loses nothing the store can take


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _release(batch: list[tuple[SpendRow, asyncio.Future[None] | None]]) -> None:
    for _, fut in batch:
        if fut is not None and not fut.done():
            fut.set_result(None)
