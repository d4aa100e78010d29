"""Keeps a replica's `KeyCache` in step with the store, off the request path.

A version row moves on every admin write; each replica polls it every `poll_s` (cheap: one row) and, on
PostgreSQL, also follows `LISTEN gw_changes`, which wakes the poll at once. A change reloads the whole
snapshot. While the store cannot be reached the cache stays as it was (requests keep being served),
`on_health(False)` is reported once with a warning, and the poll goes on until it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from gateway.store.cache import KeyCache
from gateway.store.postgres import PgDatabase
from gateway.store.store import CHANNEL, Store
from gateway.store.types import StoreUnavailable

log = structlog.get_logger("gateway")


class StoreSync:
    def __init__(self, store: Store, cache: KeyCache, poll_s: float, on_health: Callable[[bool], None],
                 listen_url: str | None = None, connect_timeout_s: float = 5.0):
        self.store, self.cache, self.poll_s = store, cache, poll_s
        self._on_health = on_health
        self.up = True
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._listen_url, self._connect_timeout = listen_url, connect_timeout_s

    async def start(self) -> None:
        """Load the first snapshot (raises StoreUnavailable) and start following changes."""
        self.cache.load(await self.store.snapshot())
        self._on_health(True)
        self._tasks.append(asyncio.create_task(self._poll(), name="store-poll"))
        if self._listen_url is not None:
            listener = PgDatabase(self._listen_url, self._connect_timeout)
            self._tasks.append(asyncio.create_task(listener.listen(CHANNEL, self._wake.set), name="store-listen"))

    async def refresh(self) -> None:
        """One poll: reload when the version moved; reports the store's health."""
        try:
            if await self.store.version() != self.cache.version:
                self.cache.load(await self.store.snapshot())
        except StoreUnavailable as exc:
            self._health(False, str(exc))
            return
        self._health(True, "")

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
                await asyncio.wait_for(self._wake.wait(), self.poll_s)  # a NOTIFY, or the poll's period
            self._wake.clear()
            await self.refresh()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
