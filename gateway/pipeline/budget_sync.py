"""Budgets start from the store's ledger, so a restart or a new worker never forgets what was spent
(docs/keys-teams-spend.md, Budgets).

Before the process serves, each budget period's spend per key and per team is read from the ledger and
handed to the state backend (`StateBackend.seed_spend`), bounded by `store.connect_timeout_s`: a store
too slow for that does not hold the start, the background task below tries again.
- Memory state: the counters are this process's own, so every `refresh_s` the ledger's spend of every
  other process (rows of other ids, `pipeline/ids.py`) replaces the previous figure: replicas and
  workers sharing a store see each other's daily spend within that interval plus the ledger's commit
  delay (monthly spend every `MONTH_EVERY_LOOKS` intervals).
- Redis state: the counters are shared. Each period is seeded once from the whole ledger, raising each
  counter to the ledger's figure (never adding to it); a marker in Redis says it was done, and a look
  every `SHARED_CHECK_S` re-seeds a Redis that restarted empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from gateway.pipeline.ids import SPEND_ROW_IDS
from gateway.state.base import Period, StateBackend, period_id
from gateway.store import Store

log = structlog.get_logger("gateway")
PERIODS: tuple[Period, ...] = ("day", "month")
SHARED_CHECK_S = 5.0  # how often a replica looks whether Redis lost the period's seed (one EXISTS a period)
# memory state: a month's rows are read every this many looks (a day's at every one): the month's query
# reads up to 31 days of the ledger, too much to repeat every second
MONTH_EVERY_LOOKS = 10
SLOW_READ_FACTOR = 20  # the pause after a look is at least this many times what it took: <= 5% of the store


def period_start(period: Period, now: float) -> str:
    """The first ledger day (YYYY-MM-DD, UTC) of the period `now` falls in."""
    pid = period_id(period, now)
    return pid if period == "day" else pid + "-01"


class BudgetSync:
    def __init__(self, store: Store, state: StateBackend, refresh_s: float, timeout_s: float,
                 clock: Callable[[], float] = time.time):
        self._store, self._state, self._clock = store, state, clock
        self._interval = SHARED_CHECK_S if state.spend_shared else refresh_s
        self._timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._looks = 0

    async def load(self) -> bool:
        """Once, at start; False (logged) when the store or Redis did not answer in time."""
        return await self._sync_bounded()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="budget-sync")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        took = 0.0
        while True:
            # a timer between looks, not synchronisation; a large ledger (a slow read) is read less often
            await asyncio.sleep(max(self._interval, took * SLOW_READ_FACTOR))
            started = time.monotonic()
            await self._sync_bounded()
            took = time.monotonic() - started

    async def _sync_bounded(self) -> bool:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._sync(self._clock())
        except Exception as exc:  # the store or Redis down or slow: budgets go on from what is counted
            if not self._failing:
                self._failing = True
                log.warning("budget_sync_failed", reason=type(exc).__name__,
                            message="budgets count from what this process knows until the store answers")
            return False
        if self._failing:
            self._failing = False
            log.info("budget_sync_recovered")
        return True

    async def _sync(self, now: float) -> None:
        state = self._state
        shared = state.spend_shared
        looks, self._looks = self._looks, self._looks + 1
        for period in PERIODS:
            if shared and await state.spend_seeded(period, now):
                continue
            # a new month is always read: the previous month's figure no longer limits anything
            if (not shared and period == "month" and looks % MONTH_EVERY_LOOKS
                    and await state.spend_seeded(period, now)):
                continue
            # memory: every other process's rows; this one's own spend is already in its counters
            exclude = None if shared else SPEND_ROW_IDS.prefix
            spent = await self._store.period_spend(period_start(period, now), exclude)
            counters = dict(spent.keys)
            counters.update(spent.teams)  # by `TeamLimits.counter` already
            await state.seed_spend(period, now, counters)
