"""Shared state in Redis, so every replica enforces one key's limits and budget together.

Each operation is one Lua script (or one command), hence atomic across replicas; in a Redis Cluster each
touches one hash slot (keys.py). A response owner's write, in the background, is the exception: its
tenant's bound and its record are in two slots (redis_owners.py). The cache is bounded per tenant
(redis_cache.py). Every operation has a hard deadline (`state.timeout_ms`).

The backend is a circuit (docs/scale-out.md, While Redis is away): the first failing operation opens it
(one warning, `on_mode(True)`), the operations already waiting on Redis stop waiting, and until a
background probe finds Redis answering again (it loads the scripts a promoted replica lacks, opens a
few connections and flushes the spend held meanwhile) every operation runs on an embedded MemoryBackend:
rpm and tpm at this process's share of each limit, budgets from Redis's last figure plus this process's
own spend since, the cache this process's own. `on_degraded(reason)` is called at each fallback. Writes
that add to a total (spend) are never cut short: cut after Redis applied them, they would count twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from redis.exceptions import RedisClusterException, RedisError

from gateway.config.types import CacheConfig, StateConfig
from gateway.state import lua
from gateway.state.base import (
    ALLOWED,
    LimitDecision,
    Period,
    Reservation,
    ResponseOwner,
    ServedName,
    SpendHold,
)
from gateway.state.holds import SpendHolds
from gateway.state.keys import cache_redis_key, check_keys, owner_key, rate_key, seeded_key, spend_key
from gateway.state.memory import MemoryBackend
from gateway.state.redis_cache import SharedCache
from gateway.state.redis_client import connect
from gateway.state.redis_held import HeldSpend, KnownSpend
from gateway.state.redis_names import SharedNames
from gateway.state.redis_owners import SharedOwners
from gateway.state.redis_pacing import RecoveryPacing
from gateway.state.redis_seed import seed_counters
from gateway.state.redis_values import local_share, reason_of, refusal
from gateway.state.redis_values import log as _log
from gateway.state.window import WindowCounts, decide, effective_cost, minute_of, previous_weight

__all__ = ["RedisBackend", "cache_redis_key", "local_share", "owner_key", "rate_key", "spend_key"]

T = TypeVar("T")

RATE_TTL_S = 180  # a bucket is read as "current" then "previous": two minutes, plus clock-skew slack
SPEND_TTL_S: dict[Period, int] = {"day": 3 * 86_400, "month": 63 * 86_400}
# redis-py's cluster errors that are not RedisErrors (no node reachable, a slot no primary serves during
# a failover) count as Redis being away too: raised past the backend, they failed the request or ended
# the recovery probe for good
_FAILURES = (RedisError, RedisClusterException, OSError, TimeoutError)
MAX_PROBE_INTERVAL_S = 1.0  # the recovery probe backs off to this
# connections opened before switching back: the operations a process has in flight at once under load;
# without them the first burst after recovery opens one each, overruns the deadline and degrades again
WARM_CONNECTIONS = 16


class RedisBackend:
    """`StateBackend` on Redis, with a local fallback while Redis is unreachable."""

    def __init__(
        self,
        url: str,
        cache: CacheConfig | None = None,
        on_degraded: Callable[[str], None] = lambda _reason: None,
        *,
        op_timeout_s: float = 0.25,
        probe_interval_s: float = MAX_PROBE_INTERVAL_S,
        max_connections: int = 64,
        state: StateConfig | None = None,
        on_mode: Callable[[bool], None] = lambda _degraded: None,
    ) -> None:
        state = state or StateConfig(backend="redis", redis_url=url)
        self._link = connect(state, op_timeout_s, max_connections)
        self._redis = self._link.client
        self._scripts = (lua.CHECK_REQUEST, lua.SETTLE_TOKENS, lua.ADD_SPEND, lua.SEED_SPEND, lua.ADD_SERVED_NAME,
                         lua.OWN_RESPONSE, lua.OWNED_ITEMS, lua.CACHE_SET)
        self._check, self._settle, self._add_spend, self._seed, add_served, own, owned, put = (
            self._redis.register_script(source) for source in self._scripts)
        self._deadline_s = op_timeout_s
        self._probe_budget_s = max(op_timeout_s * 4, 1.0)  # the probe's and the warm-up's, per step
        self._probe_interval_s = probe_interval_s
        self._on_degraded = on_degraded
        self._on_mode = on_mode
        self._share_of = max(1, state.replicas * state.workers)  # each process's part of a limit, degraded
        self._where = self._link.where
        self._local = MemoryBackend(cache)
        self._cache = SharedCache(self._redis, put, self._local, self._run, cache or CacheConfig())
        self._reason: str | None = None  # why we are degraded; None while Redis answers
        self._probe: asyncio.Task[None] | None = None
        self._pacing = RecoveryPacing()  # a Redis that keeps dropping right after answering is tried later
        # Spend while degraded: added to Redis on recovery, so an outage does not forgive real cost.
        self._unsynced = HeldSpend()
        self._known = KnownSpend()  # the figures budgets count from while Redis is away
        self._holds = SpendHolds()  # this process's requests in flight, per budget (holds.py)
        self._owners = SharedOwners(self._redis, own, owned, self._local, self._run, op_timeout_s)
        self._names = SharedNames(self._redis, add_served, self._local, self._run)
        self._waiting: set[asyncio.Timeout] = set()  # deadlines of operations waiting on Redis now

    @property
    def degraded(self) -> bool:
        return self._reason is not None

    async def _run(self, remote: Callable[[], Awaitable[T]], local: Callable[[], Awaitable[T]],
                   *, cut_short: bool = True, within_s: float | None = None) -> T:
        """Run `remote` against Redis; on failure or while degraded, run `local` instead. `cut_short`:
        the wait ends as soon as another operation finds Redis away (False for additive writes).
        `within_s`: what is left of the request's deadline (default: all of it)."""
        reason = self._reason
        if reason is None:
            try:
                async with asyncio.timeout(self._deadline_s if within_s is None else within_s) as deadline:
                    return await self._remote_within(deadline, remote, cut_short)
            except _FAILURES as exc:
                reason = self._reason or reason_of(exc)  # cut short: the reason the circuit opened on
                self._enter_degraded(reason)
        self._on_degraded(reason)
        return await local()

    async def _remote_within(self, deadline: asyncio.Timeout, remote: Callable[[], Awaitable[T]],
                             cut_short: bool) -> T:
        if not cut_short:
            return await remote()
        self._waiting.add(deadline)
        try:
            return await remote()
        finally:
            self._waiting.discard(deadline)

    def _enter_degraded(self, reason: str) -> None:
        if self._reason is not None:
            return
        self._reason = reason
        self._release_waiting()
        loop = asyncio.get_running_loop()
        wait_s = self._pacing.fell_back(loop.time(), min(0.05, self._probe_interval_s))
        _log().warning("state_backend_degraded", reason=reason, redis=self._where, flaps=self._pacing.flaps,
                       probe_in_s=wait_s, fallback=f"local limits (1/{self._share_of} of each) until Redis answers")
        self._on_mode(True)
        self._probe = loop.create_task(self._probe_until_recovered(wait_s))

    def _release_waiting(self) -> None:
        """Redis is known away: every operation still waiting on it times out now and goes local, instead
        of each paying its full `state.timeout_ms` (a stalled node, a slot whose primary died)."""
        now = asyncio.get_running_loop().time()
        for deadline in self._waiting:
            if not deadline.expired():
                deadline.reschedule(now)
        self._waiting.clear()

    async def _probe_until_recovered(self, delay: float) -> None:
        # Backoff from a short first wait (longer for a flap: redis_pacing.py): a failover is over in
        # seconds, and an outage costs one probe per MAX_PROBE_INTERVAL_S at most, never one per request.
        answered = False  # the last attempt's ping: its pool leads to the live primary (or primaries)
        while True:
            # Drop pooled connections (dead after a restart or failover, or leading to the old master; the
            # next command reconnects, re-reading slots or asking the Sentinels), unless a ping answered:
            # dropping what that attempt made ready started a busy host over, again and again.
            if not answered:
                with contextlib.suppress(*_FAILURES):
                    await self._link.reset()
            await asyncio.sleep(delay)  # a timer between probes, not synchronisation
            delay = min(delay * 2, self._probe_interval_s)
            answered = False
            try:
                # After the reset a ping re-reads the cluster's slots and connects to every primary first:
                # several round trips, each slower on a busy host; a budget of one request's deadline
                # failed attempt after attempt there, each costing a backoff (no request waits on these)
                async with asyncio.timeout(self._probe_budget_s):
                    await self._link.ping()
                answered = True
                async with asyncio.timeout(self._probe_budget_s):
                    await self._link.prepare(self._scripts, WARM_CONNECTIONS)
                await self._unsynced.write(self._write_held)
            except _FAILURES:
                continue
            break
        self._reason = None
        self._pacing.restored(asyncio.get_running_loop().time())
        self._on_mode(False)
        _log().info("state_backend_restored", redis=self._where)
        try:  # spend held while the pass above waited: none is held now, so this pass ends it
            await self._unsynced.write(self._write_held)
        except _FAILURES as exc:
            self._enter_degraded(reason_of(exc))  # the next probe writes it

    async def _write_held(self, rkey: str, usd: float, ttl: int) -> None:
        async with asyncio.timeout(self._deadline_s):
            await self._add_spend(keys=[rkey], args=[repr(usd), ttl])

    # -- rate limits ---------------------------------------------------------------------------

    async def check_request(
        self, key: str, rpm: int | None, tpm: int | None, reserve_tokens: int, now: float
    ) -> tuple[LimitDecision, Reservation | None]:
        if rpm is None and tpm is None:
            return ALLOWED, None  # an unlimited key costs no round trip, and survives any outage

        async def remote() -> tuple[LimitDecision, Reservation | None]:
            return await self._check_remote(key, rpm, tpm, reserve_tokens, now)

        async def local() -> tuple[LimitDecision, Reservation | None]:
            # This process's share: the replicas together admit about the limit while Redis is away.
            share_rpm, share_tpm = local_share(rpm, self._share_of), local_share(tpm, self._share_of)
            return await self._local.check_request(key, share_rpm, share_tpm, reserve_tokens, now)

        return await self._run(remote, local)

    async def _check_remote(
        self, key: str, rpm: int | None, tpm: int | None, reserve_tokens: int, now: float
    ) -> tuple[LimitDecision, Reservation | None]:
        minute = minute_of(now)
        cost = effective_cost(reserve_tokens, tpm) if tpm is not None else 0
        keys = check_keys(key, minute)
        args = ["" if rpm is None else rpm, "" if tpm is None else tpm, cost, repr(previous_weight(now))]
        allowed, rc, rp, tc, tp = await self._check(keys=keys, args=[*args, RATE_TTL_S])
        if not allowed:
            counts = (WindowCounts(current=rc, previous=rp), WindowCounts(current=tc, previous=tp))
            return replace(refusal(decide(*counts, rpm, tpm, cost, now), rpm), counts=(rc, rp, tc, tp)), None
        counted = LimitDecision(allowed=True, counts=(rc + (rpm is not None), rp, tc + cost * (tpm is not None), tp))
        return counted, Reservation(key=key, minute=minute, tokens=None if tpm is None else cost, shared=True,
                                    requests=int(rpm is not None))

    async def settle_tokens(self, reservation: Reservation, actual_tokens: int, now: float) -> None:
        if not reservation.shared:
            # Counted locally during an outage: settle there, never against the other replicas' counts.
            await self._local.settle_tokens(reservation, actual_tokens, now)
            return
        if reservation.tokens is None:
            return
        delta = max(0, actual_tokens) - reservation.tokens
        if delta == 0:
            return
        # too much reserved: handed back to its minute; more used: counted in the minute the answer ended
        minute = reservation.minute if delta < 0 else max(minute_of(now), reservation.minute)
        rkey = rate_key(reservation.key, "tpm", minute)

        async def remote() -> None:
            await self._settle(keys=[rkey], args=[delta, RATE_TTL_S])

        async def local() -> None:
            # the Redis bucket keeps a surplus until its TTL; tokens used beyond it count against this
            # process's share meanwhile
            if delta > 0:
                await self._local.settle_tokens(Reservation(reservation.key, minute, 0), delta, now)

        await self._run(remote, local)

    async def release(self, reservation: Reservation) -> None:
        if not reservation.shared:
            await self._local.release(reservation)
            return
        taken = [(limit, n) for limit, n in (("rpm", reservation.requests), ("tpm", reservation.tokens or 0)) if n]

        async def remote() -> None:
            for limit, n in taken:
                await self._settle(keys=[rate_key(reservation.key, limit, reservation.minute)], args=[-n, RATE_TTL_S])

        async def local() -> None:
            return None  # Redis keeps the count until its TTL: refusing a little more, never admitting more

        await self._run(remote, local)

    # -- budgets -------------------------------------------------------------------------------

    async def add_spend(self, key: str, period: Period, usd: float, now: float) -> None:
        rkey = spend_key(key, period, now)

        async def remote() -> None:
            total = await self._add_spend(keys=[rkey], args=[repr(usd), SPEND_TTL_S[period]])
            self._known.remember(key, period, now, float(total))

        async def local() -> None:
            self._unsynced.hold(rkey, usd, SPEND_TTL_S[period])

        await self._run(remote, local, cut_short=False)  # applied then cut, it would be added twice

    async def spend(self, key: str, period: Period, now: float) -> float:
        rkey = spend_key(key, period, now)

        async def remote() -> float:
            raw = await self._redis.get(rkey)
            total = float(raw) if raw is not None else 0.0
            self._known.remember(key, period, now, total)
            return total

        async def local() -> float:
            # The last figure Redis (or the ledger) gave, plus what this replica spent since Redis went away.
            return self._known.base(key, period, now) + self._unsynced.amount(rkey)

        return await self._run(remote, local)

    async def hold_spend(self, key: str, period: Period, budget: float, usd: float,
                         now: float) -> tuple[SpendHold | None, float]:
        spent = await self.spend(key, period, now)
        return self._holds.take(key, period, spent, budget, usd, now), spent

    async def charge_spend(self, hold: SpendHold, usd: float, now: float) -> None:
        try:
            if usd > 0:
                await self.add_spend(hold.key, hold.period, usd, now)
        finally:
            self._holds.give_back(hold)

    @property
    def spend_shared(self) -> bool:
        return True

    async def spend_seeded(self, period: Period, now: float) -> bool:
        """Redis holds the period's seed marker; a Redis that restarted empty does not. Unreachable: whether
        the fallback has the ledger's figures of the period (once they are in, nothing to do until Redis
        answers; the next look seeds it)."""
        async def remote() -> bool:
            return bool(await self._redis.exists(seeded_key(period, now)))

        async def local() -> bool:
            return self._known.has_ledger(period, now)

        return await self._run(remote, local)

    async def seed_spend(self, period: Period, now: float, ledger: Mapping[str, float]) -> None:
        self._known.take_ledger(period, now, ledger)  # the fallback's base, whatever Redis does next
        await seed_counters(self._link, self._seed, period, now, ledger, SPEND_TTL_S[period], self._deadline_s,
                            self._probe_budget_s)

    # -- cache ---------------------------------------------------------------------------------

    async def cache_get(self, cache_key: str, *, tenant: str) -> bytes | None:
        return await self._cache.get(cache_key, tenant)  # one GET (redis_cache.py)

    async def cache_set(self, cache_key: str, value: bytes, ttl_s: float, *, tenant: str) -> None:
        await self._cache.set(cache_key, value, ttl_s, tenant)  # one script, bounded per tenant

    # -- response ownership ----------------------------------------------------------------------

    def record_response_owner(self, response_id: str, owner: ResponseOwner, ttl_s: float,
                              items: Sequence[str] = ()) -> None:
        # in the background, its items in the same script call, bounded per tenant (redis_owners.py)
        self._owners.record(response_id, owner, ttl_s, items)

    async def response_owner(self, response_id: str) -> ResponseOwner | None:
        return await self._owners.read(response_id)

    async def unowned_item(self, tenant: str, item_ids: Sequence[str]) -> str | None:
        return await self._owners.unowned_item(tenant, item_ids)  # one script call per 256 ids

    # -- names upstreams reported (docs/agents.md, "Names the gateway gave back") -----------------

    def record_served_name(self, name: str, served: ServedName) -> None:
        self._names.record(name, served)  # in the background, bounded (redis_names.py)

    async def served_names(self, name: str) -> tuple[ServedName, ...]:
        return await self._names.read(name)

    # -- lifecycle -----------------------------------------------------------------------------

    async def healthy(self) -> bool:
        if self._reason is not None:
            return False  # the probe task flips this back once Redis answers
        try:
            async with asyncio.timeout(self._deadline_s):
                await self._redis.ping()
        except _FAILURES as exc:
            self._enter_degraded(reason_of(exc))
            return False
        return True

    async def warm(self) -> None:
        try:
            async with asyncio.timeout(self._probe_budget_s):  # several round trips, at start
                await self._link.prepare(self._scripts, WARM_CONNECTIONS)
        except _FAILURES as exc:
            self._enter_degraded(reason_of(exc))  # the probe takes over, as after any failure

    async def close(self) -> None:
        self._owners.cancel()
        self._names.cancel()
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        with contextlib.suppress(*_FAILURES):
            await self._link.close()
        await self._local.close()
