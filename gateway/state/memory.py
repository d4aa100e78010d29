"""In-process state: the embedded default, and the Redis backend's fallback while Redis is down.

No method awaits anything, so each operation runs to completion without interleaving: check-and-count
is atomic without locks. Memory stays bounded: rate windows of keys idle for two minutes are dropped,
one spend figure is kept per key and period kind (plus, with a store, the other processes' spend from
its ledger), the cache is an LRU of at most `max_entries` and `max_bytes`, and response owners and their output items
are bounded in all and per tenant.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from gateway.config.types import CacheConfig
from gateway.state.base import (
    ALLOWED,
    MAX_MODELS_PER_SERVED_NAME,
    MAX_OWNED_ITEMS_PER_TENANT,
    MAX_RESPONSE_OWNERS_PER_TENANT,
    SERVED_NAME_TTL_S,
    LimitDecision,
    Period,
    Reservation,
    ResponseOwner,
    ServedName,
    SpendHold,
    period_id,
    tenant_of,
)
from gateway.state.holds import SpendHolds
from gateway.state.window import WindowCounts, decide, effective_cost, minute_of


class _Window:
    """Two adjacent fixed-minute buckets of one limit."""

    __slots__ = ("current", "minute", "previous")

    def __init__(self, minute: int) -> None:
        self.minute = minute
        self.current = 0
        self.previous = 0

    def roll(self, minute: int) -> None:
        # A clock stepping back keeps the newer buckets rather than forgetting counted traffic.
        if minute <= self.minute:
            return
        self.previous = self.current if minute == self.minute + 1 else 0
        self.current = 0
        self.minute = minute

    def counts(self) -> WindowCounts:
        return WindowCounts(current=self.current, previous=self.previous)

    def adjust(self, minute: int, delta: int) -> None:
        """Apply a settlement to the bucket it was reserved in, if that bucket still matters."""
        if minute == self.minute:
            self.current = max(0, self.current + delta)
        elif minute == self.minute - 1:
            self.previous = max(0, self.previous + delta)


class _KeyWindows:
    __slots__ = ("rpm", "tpm")

    def __init__(self, minute: int) -> None:
        self.rpm = _Window(minute)
        self.tpm = _Window(minute)

    def roll(self, minute: int) -> None:
        self.rpm.roll(minute)
        self.tpm.roll(minute)


# response ids remembered at most, oldest dropped first (an id dropped is unknown: a 404, never a leak), of
# which one tenant holds at most MAX_RESPONSE_OWNERS_PER_TENANT (its own oldest dropped first)
MAX_RESPONSE_OWNERS = 100_000
# output item ids remembered at most (beside the response ids), oldest dropped first, of which one tenant holds
# at most MAX_OWNED_ITEMS_PER_TENANT (its own oldest dropped first)
MAX_OWNED_ITEMS = 100_000
# served names remembered at most, oldest recorded dropped first (in one process: what the runtime's own
# table already knows; kept here for the Redis backend's fallback)
MAX_SERVED_NAMES = 4096


class MemoryBackend:
    """`StateBackend` held in this process. `clock` (monotonic seconds) drives cache expiry only."""

    def __init__(self, cache: CacheConfig | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        cache = cache or CacheConfig()
        self._max_entries, self._max_bytes = cache.max_entries, cache.max_bytes
        self._clock = clock
        self._windows: dict[str, _KeyWindows] = {}
        self._swept_minute = 0
        self._spend: dict[tuple[str, Period], tuple[str, float]] = {}
        # every other process's spend of the period, per counter, from the store's ledger (seed_spend)
        self._others: dict[Period, tuple[str, Mapping[str, float]]] = {}
        self.holds = SpendHolds()  # the estimated cost of the requests in flight, per budget (holds.py)
        self._cache: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._cache_bytes = 0  # of the values in `_cache`
        self._owners: OrderedDict[str, tuple[float, ResponseOwner]] = OrderedDict()  # id -> (expiry, owner)
        self._owned: dict[str, OrderedDict[str, None]] = {}  # each tenant's ids in `_owners`, oldest first
        self._items: dict[str, OrderedDict[str, float]] = {}  # each tenant's output item ids -> expiry, oldest first
        self._items_order: OrderedDict[tuple[str, str], None] = OrderedDict()  # (tenant, item id), oldest first
        self._served: OrderedDict[str, tuple[float, tuple[ServedName, ...]]] = OrderedDict()  # (expiry, served)

    async def check_request(
        self, key: str, rpm: int | None, tpm: int | None, reserve_tokens: int, now: float
    ) -> tuple[LimitDecision, Reservation | None]:
        if rpm is None and tpm is None:
            return ALLOWED, None  # nothing to enforce, nothing to remember
        windows = self._windows_at(key, minute_of(now))
        cost = effective_cost(reserve_tokens, tpm) if tpm is not None else 0
        decision = decide(windows.rpm.counts(), windows.tpm.counts(), rpm, tpm, cost, now)
        if decision.allowed:
            if rpm is not None:
                windows.rpm.current += 1
            if tpm is not None:
                windows.tpm.current += cost
        r, t = windows.rpm, windows.tpm
        decision = replace(decision, counts=(r.current, r.previous, t.current, t.previous))
        if not decision.allowed:
            return decision, None
        return decision, Reservation(key=key, minute=windows.tpm.minute, tokens=None if tpm is None else cost,
                                     requests=int(rpm is not None))

    async def settle_tokens(self, reservation: Reservation, actual_tokens: int, now: float) -> None:
        if reservation.tokens is None:
            return
        delta = max(0, actual_tokens) - reservation.tokens
        if delta < 0:  # reserved too much: handed back to its minute, if that still weighs
            windows = self._windows.get(reservation.key)
            if windows is not None:
                windows.tpm.adjust(reservation.minute, delta)
        elif delta > 0:  # used more: counted when the answer ends (a long one's minute has left the window)
            self._windows_at(reservation.key, minute_of(now)).tpm.current += delta

    async def release(self, reservation: Reservation) -> None:
        windows = self._windows.get(reservation.key)
        if windows is not None:
            windows.rpm.adjust(reservation.minute, -reservation.requests)
            windows.tpm.adjust(reservation.minute, -(reservation.tokens or 0))

    def _windows_at(self, key: str, minute: int) -> _KeyWindows:
        """The key's windows rolled to `minute` (made if it has none), the newest bucket current."""
        self._sweep(minute)
        windows = self._windows.get(key)
        if windows is None:
            windows = self._windows[key] = _KeyWindows(minute)
        windows.roll(minute)
        return windows

    def _sweep(self, minute: int) -> None:
        """Once per minute, forget keys whose buckets are both older than the window."""
        if minute == self._swept_minute:
            return
        self._swept_minute = minute
        stale = [k for k, w in self._windows.items() if w.rpm.minute < minute - 1]
        for k in stale:
            del self._windows[k]

    async def add_spend(self, key: str, period: Period, usd: float, now: float) -> None:
        pid = period_id(period, now)
        held = self._spend.get((key, period))
        if held is None or held[0] < pid:
            self._spend[(key, period)] = (pid, usd)  # a new period starts from zero
        elif held[0] == pid:
            self._spend[(key, period)] = (pid, held[1] + usd)
        # else: a late add for a period already closed here; it no longer limits anything

    async def spend(self, key: str, period: Period, now: float) -> float:
        pid = period_id(period, now)
        held = self._spend.get((key, period))
        own = held[1] if held is not None and held[0] == pid else 0.0
        others = self._others.get(period)
        return own + (others[1].get(key, 0.0) if others is not None and others[0] == pid else 0.0)

    async def hold_spend(self, key: str, period: Period, budget: float, usd: float,
                         now: float) -> tuple[SpendHold | None, float]:
        spent = await self.spend(key, period, now)
        return self.holds.take(key, period, spent, budget, usd, now), spent

    async def charge_spend(self, hold: SpendHold, usd: float, now: float) -> None:
        try:
            if usd > 0:
                await self.add_spend(hold.key, hold.period, usd, now)
        finally:
            self.holds.give_back(hold)

    @property
    def spend_shared(self) -> bool:
        return False

    async def spend_seeded(self, period: Period, now: float) -> bool:
        others = self._others.get(period)
        return others is not None and others[0] == period_id(period, now)

    async def seed_spend(self, period: Period, now: float, ledger: Mapping[str, float]) -> None:
        self._others[period] = (period_id(period, now), dict(ledger))

    # The cache is one LRU of every tenant's answers (`tenant` unused): bounded in all, as this process is.
    async def cache_get(self, cache_key: str, *, tenant: str = "-") -> bytes | None:
        entry = self._cache.get(cache_key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            self._drop_cached(cache_key)
            return None
        self._cache.move_to_end(cache_key)
        return entry[1]

    async def cache_set(self, cache_key: str, value: bytes, ttl_s: float, *, tenant: str = "-") -> None:
        if self._max_entries <= 0 or ttl_s <= 0 or len(value) > self._max_bytes:
            return
        self._drop_cached(cache_key)
        self._cache[cache_key] = (self._clock() + ttl_s, value)
        self._cache_bytes += len(value)
        # least recently used first, until both bounds hold: a count alone would let big answers fill memory
        while len(self._cache) > self._max_entries or self._cache_bytes > self._max_bytes:
            self._drop_cached(next(iter(self._cache)))

    def _drop_cached(self, cache_key: str) -> None:
        entry = self._cache.pop(cache_key, None)
        if entry is not None:
            self._cache_bytes -= len(entry[1])

    def record_response_owner(self, response_id: str, owner: ResponseOwner, ttl_s: float,
                              items: Sequence[str] = ()) -> None:
        self._forget_owner(response_id)  # a record again: the newest, of its new owner
        expiry = self._clock() + ttl_s
        self._owners[response_id] = (expiry, owner)
        tenant = tenant_of(owner.key, owner.team)
        ids = self._owned.setdefault(tenant, OrderedDict())
        ids[response_id] = None
        if len(ids) > MAX_RESPONSE_OWNERS_PER_TENANT:
            self._forget_owner(next(iter(ids)))
        while len(self._owners) > MAX_RESPONSE_OWNERS:
            self._forget_owner(next(iter(self._owners)))
        if items:
            self._own_items(tenant, items, expiry)

    def _own_items(self, tenant: str, items: Sequence[str], expiry: float) -> None:
        held = self._items.setdefault(tenant, OrderedDict())
        for item in items:
            held.pop(item, None)  # recorded again: the newest
            held[item] = expiry
            self._items_order.pop((tenant, item), None)
            self._items_order[(tenant, item)] = None
        while len(held) > MAX_OWNED_ITEMS_PER_TENANT:
            self._forget_item(tenant, next(iter(held)))
        while len(self._items_order) > MAX_OWNED_ITEMS:
            self._forget_item(*next(iter(self._items_order)))

    def _forget_item(self, tenant: str, item: str) -> None:
        self._items_order.pop((tenant, item), None)
        held = self._items.get(tenant)
        if held is not None:
            held.pop(item, None)
            if not held:
                del self._items[tenant]

    async def unowned_item(self, tenant: str, item_ids: Sequence[str]) -> str | None:
        held = self._items.get(tenant)
        now = self._clock()
        for item in item_ids:
            expiry = held.get(item) if held is not None else None
            if expiry is None:
                return item
            if expiry <= now:
                self._forget_item(tenant, item)
                return item
        return None

    def owned_items_held(self) -> int:
        """Output item ids remembered now, expired ones not yet dropped included (for tests)."""
        return len(self._items_order)

    def _forget_owner(self, response_id: str) -> None:
        entry = self._owners.pop(response_id, None)
        if entry is None:
            return
        tenant = tenant_of(entry[1].key, entry[1].team)
        ids = self._owned.get(tenant)
        if ids is not None:
            ids.pop(response_id, None)
            if not ids:
                del self._owned[tenant]

    async def response_owner(self, response_id: str) -> ResponseOwner | None:
        entry = self._owners.get(response_id)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            self._forget_owner(response_id)
            return None
        return entry[1]

    def response_owners_held(self) -> int:
        """Response ids remembered now, expired ones not yet dropped included (for tests)."""
        return len(self._owners)

    def record_served_name(self, name: str, served: ServedName) -> None:
        known = self._served_now(name)
        if served not in known and len(known) < MAX_MODELS_PER_SERVED_NAME:
            known = (*known, served)
        self._served[name] = (self._clock() + SERVED_NAME_TTL_S, known)
        self._served.move_to_end(name)
        while len(self._served) > MAX_SERVED_NAMES:
            self._served.popitem(last=False)

    async def served_names(self, name: str) -> tuple[ServedName, ...]:
        return self._served_now(name)

    def _served_now(self, name: str) -> tuple[ServedName, ...]:
        entry = self._served.get(name)
        if entry is None:
            return ()
        if entry[0] <= self._clock():
            del self._served[name]
            return ()
        return entry[1]

    def tracked_keys(self) -> int:
        """Keys whose rate windows are held (for tests and metrics: proves the pruning)."""
        return len(self._windows)

    def cache_len(self) -> int:
        """Entries currently held, expired ones not yet evicted included (for tests and metrics)."""
        return len(self._cache)

    async def healthy(self) -> bool:
        return True

    async def warm(self) -> None:
        return None  # nothing to connect to

    async def close(self) -> None:
        self._windows.clear()
        self._cache.clear()
        self._cache_bytes = 0
        self._owners.clear()
        self._owned.clear()
        self._items.clear()
        self._items_order.clear()
        self._served.clear()
