"""Keeps a replica's `KeyCache` in step with the store, off the request path.

A version row moves on every admin write; each replica polls it every `poll_s` (cheap: one row) and, on
PostgreSQL, also follows `LISTEN gw_changes`, which wakes the poll at once. A change reloads the whole
snapshot. While the store cannot be reached the cache stays as it was (requests keep being served),
`on_health(False)` is reported once with a warning, and the poll goes on until it answers again.

Neither task ever ends before `close`: a row the gateway cannot read is left out of the snapshot (logged
as `store_row_skipped` and counted once per change of that row, not once per poll), and anything else
that goes wrong in a poll is logged, counted and retried with a backoff (docs/keys-teams-spend.md, "Rows
the gateway cannot read"), so a later revocation still reaches every replica.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from gateway.store.cache import KeyCache
from gateway.store.postgres import PgDatabase
from gateway.store.store import CHANNEL, Store
from gateway.store.types import SkippedRow, Snapshot, StoreUnavailable

log = structlog.get_logger("gateway")
# a poll that keeps failing unexpectedly is retried at least this often: once the cause is gone, a
# revocation still reaches every replica within 2 s (docs/keys-teams-spend.md)
MAX_BACKOFF_S = 1.0
LISTEN_RETRY_S = 5.0
LOG_EVERY = 60  # failures in a row: the first is logged, then one in this many


class StoreSync:
    def __init__(self, store: Store, cache: KeyCache, poll_s: float, on_health: Callable[[bool], None],
                 listen_url: str | None = None, connect_timeout_s: float = 5.0,
                 on_error: Callable[[str], None] = lambda op: None):
        self.store, self.cache, self.poll_s = store, cache, poll_s
        self._on_health, self._on_error = on_health, on_error
        self.up = True
        self.failures = 0  # unexpected poll failures in a row (they set the backoff)
        self._skipped: dict[tuple[str, str, int], int] = {}  # (table, name, nth) -> fingerprint, reported
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._listen_url, self._connect_timeout = listen_url, connect_timeout_s

    async def start(self) -> None:
        """Load the first snapshot (raises StoreUnavailable) and start following changes."""
        self._load(await self.store.snapshot())
        self._on_health(True)
        self._tasks.append(asyncio.create_task(self._poll(), name="store-poll"))
        if self._listen_url is not None:
            self._tasks.append(asyncio.create_task(self._listen(self._listen_url), name="store-listen"))

    async def refresh(self) -> None:
        """One poll: reload when the version moved; reports the store's health. Raises only what no
        store error explains (the poll loop reports and survives it)."""
        try:
            if await self.store.version() != self.cache.version:
                self._load(await self.store.snapshot())
        except StoreUnavailable as exc:
            self._health(False, str(exc))
            return
        self._health(True, "")

    def _load(self, snap: Snapshot) -> None:
        self.cache.load(snap)
        self._report_skipped(snap.skipped)

    def _report_skipped(self, rows: tuple[SkippedRow, ...]) -> None:
        """One log line and one count per unreadable row and change of it; a row fixed or deleted is
        forgotten (it is reported again if it breaks again)."""
        seen: dict[tuple[str, str, int], int] = {}
        for row in rows:
            n = 0
            while (row.table, row.name, n) in seen:  # several rows of one name (a key's secrets, no name)
                n += 1
            ident = (row.table, row.name, n)
            seen[ident] = row.fingerprint
            if self._skipped.get(ident) != row.fingerprint:
                log.error("store_row_skipped", table=row.table, name=row.name, column=row.column, reason=row.reason,
                          message="this row is left out until it is fixed or deleted; every other row syncs")
                self._on_error("refresh")  # the sync's operation: what it could not read
        self._skipped = seen

    def _health(self, up: bool, reason: str) -> None:
        if up != self.up:
            self.up = up
            if up:
                log.info("store_recovered")
            else:
                log.warning("store_unavailable", reason=reason,
                            message="serving stored keys from this replica's cache; admin writes answer 503")
        self._on_health(up)

    async def _poll(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._period())  # a NOTIFY, or the poll's period
            self._wake.clear()
            try:
                await self.refresh()
            except Exception as exc:  # the sync must outlive any one failure
                self._failed("store_sync_failed", exc)
                continue
            self.failures = 0

    def _period(self) -> float:
        """`poll_s`, doubled for each unexpected failure in a row, up to MAX_BACKOFF_S."""
        if not self.failures:
            return self.poll_s
        return max(self.poll_s, min(MAX_BACKOFF_S, self.poll_s * 2.0 ** min(self.failures, 16)))

    def _failed(self, event: str, exc: BaseException) -> None:
        self.failures += 1
        if self.failures % LOG_EVERY == 1:
            log.error(event, error=type(exc).__name__, failures=self.failures, retry_in_s=round(self._period(), 2),
                      message="the cache keeps its last snapshot; retrying")
        self._health(False, type(exc).__name__)  # store_up 0, and counted as a failed refresh

    async def _listen(self, url: str) -> None:
        """`LISTEN` until closed; an unexpected error restarts it after a pause (the poll covers the gap)."""
        while True:
            try:
                await PgDatabase(url, self._connect_timeout).listen(CHANNEL, self._wake.set)
            except Exception as exc:  # notifications only hurry the poll: go on
                log.warning("store_listen_failed", error=type(exc).__name__)
                await asyncio.sleep(LISTEN_RETRY_S)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
