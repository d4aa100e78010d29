"""The state interface shared by every replica: rate limits, token reservations, budgets, response cache.

Two implementations sit behind `StateBackend`: `memory.MemoryBackend` (the embedded default, one process)
and `redis.RedisBackend` (shared across replicas, degrading to a local MemoryBackend while Redis is down).
All methods are async because the Redis one does network I/O; the memory one never awaits, so each of
its operations is atomic with respect to the event loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from gateway.config.types import CacheConfig, StateConfig

Period = Literal["day", "month"]
LimitName = Literal["rpm", "tpm"]
MAX_PENDING_OWNER_WRITES = 1024  # response-owner writes in flight to a shared store, at most
# response ids one tenant (`tenant_of`) holds at most, in every backend: past it, its own oldest is dropped,
# so one tenant's traffic never pushes another's ids out nor fills a shared store (docs/responses-bridge.md)
MAX_RESPONSE_OWNERS_PER_TENANT = 10_000
# output item ids one tenant holds at most, recorded with its responses (an `item_reference` names one):
# counted apart from its response ids, so a response of many items never makes its id unknown sooner;
# past it, the tenant's own oldest items are dropped (docs/responses-bridge.md, Ownership)
MAX_OWNED_ITEMS_PER_TENANT = 10_000
MAX_PENDING_NAME_WRITES = 256  # served-name writes in flight (one per name a process learns: rare)
SERVED_NAME_TTL_S = 30 * 86_400  # a served name kept since it was last recorded (a `--resume` days later)
MAX_MODELS_PER_SERVED_NAME = 16  # models kept under one served name (two on one upstream are already rare)


@dataclass(frozen=True, slots=True)
class LimitDecision:
    allowed: bool
    retry_after_s: float = 0.0
    limit: LimitName | None = None  # which limit refused; None when allowed
    # the window's buckets once this request is counted (as read, when refused): rpm current, rpm
    # previous, tpm current, tpm previous; what the x-ratelimit-* headers are computed from
    counts: tuple[int, int, int, int] | None = None


ALLOWED = LimitDecision(allowed=True)


@dataclass(frozen=True, slots=True)
class Reservation:
    """What `check_request` counted for one admitted request: the request against rpm (`requests`: 1, or 0
    without an rpm) and tokens up front against tpm (`tokens`, None without a tpm), to be replaced by the
    real usage later (`settle_tokens`), or all taken back (`release`) when a later check refuses it."""

    key: str
    minute: int  # the fixed minute bucket they were counted in
    tokens: int | None
    # True when counted in the shared store; a Redis backend that reserved locally during an outage
    # settles locally too, so a local reservation never subtracts from the other replicas' counts.
    shared: bool = False
    requests: int = 0


@dataclass(frozen=True, slots=True)
class SpendHold:
    """A request's estimated cost, held against a budget from its admission until its real cost is
    counted (`StateBackend.hold_spend`, `charge_spend`): in this process only (`state/holds.py`)."""

    key: str
    period: Period
    period_id: str  # the period it was admitted in (`period_id`)
    usd: float


@dataclass(frozen=True, slots=True)
class ResponseOwner:
    """Who created a response id the gateway relayed: the key's counter and its team's (`ApiKey.counter`,
    `TeamLimits.counter`: a stored one's id, so a namesake created later is someone else; None: no team;
    a key of None: an unauthenticated caller)."""

    key: str | None
    team: str | None = None

    def admits(self, key: str | None, team: str | None) -> bool:
        """The creating key, or another key of the same team (docs/responses-bridge.md, ownership)."""
        return key == self.key or (team is not None and team == self.team)


@dataclass(frozen=True, slots=True)
class ServedName:
    """A model whose answer carried a name its upstream reported, and the configured upstream name (the
    deployment's `model`) it answered under: what another process checks against its own config before it
    takes the name (docs/agents.md, "Names the gateway gave back")."""

    model: str
    upstream: str


# a response id longer than this was never given out by an upstream: unknown, without a lookup
MAX_RESPONSE_ID_CHARS = 256


def tenant_of(key: str | None, team: str | None) -> str:
    """Whose share a stored item counts against (response owners, cached answers): its team's, else its
    key's, by their counters; one tenant for every unauthenticated caller. One to one: the prefixes keep a
    team and a key of one name apart."""
    if team is not None:
        return f"team:{team}"
    return "-" if key is None else f"key:{key}"


class StateBackend(Protocol):
    async def check_request(
        self, key: str, rpm: int | None, tpm: int | None, reserve_tokens: int, now: float
    ) -> tuple[LimitDecision, Reservation | None]:
        """Atomically count one request against rpm and reserve tokens against tpm.

        A refused request counts nothing. The reservation is None when there is no tpm to settle.
        """
        ...

    async def settle_tokens(self, reservation: Reservation, actual_tokens: int, now: float) -> None:
        """Replace a reservation by the real usage (the provider's counts) once the answer ends, at `now`:
        what it reserved too much is taken back from the minute it was counted in; what it used beyond
        that is counted in the minute of `now` (an answer that took minutes is charged when it ends, not
        in a minute that has left the window)."""
        ...

    async def release(self, reservation: Reservation) -> None:
        """Take back all `check_request` counted, for a request a later check refused (its team's limit)."""
        ...

    async def add_spend(self, key: str, period: Period, usd: float, now: float) -> None: ...

    async def spend(self, key: str, period: Period, now: float) -> float: ...

    # A budget is checked and its request's estimated cost held in one step of the event loop, so the
    # requests this process admits together see each other (docs/keys-teams-spend.md, Budgets).
    async def hold_spend(self, key: str, period: Period, budget: float, usd: float,
                         now: float) -> tuple[SpendHold | None, float]:
        """Admit a request while the period's spend plus what this process's requests in flight hold is
        under `budget`, and hold `usd` (its estimated cost) until `charge_spend`: the hold (None: refused,
        nothing held), and the spend read (at the budget or over: used up; under: held by requests in
        flight)."""
        ...

    async def charge_spend(self, hold: SpendHold, usd: float, now: float) -> None:
        """The request's real cost (`add_spend`), then its hold given back: never a moment counting neither."""
        ...

    # Budgets start from the store's ledger (docs/keys-teams-spend.md, Budgets): `pipeline/budget_sync.py`
    # reads the period's spend per counter and hands it here.
    @property
    def spend_shared(self) -> bool:
        """True: one counter for every process (Redis), seeded once a period from the whole ledger.
        False: this process's own counters, to which the ledger adds every other process's spend."""
        ...

    async def spend_seeded(self, period: Period, now: float) -> bool:
        """Whether the period's counters were already seeded (shared ones: by any process)."""
        ...

    async def seed_spend(self, period: Period, now: float, ledger: Mapping[str, float]) -> None:
        """The ledger's spend of the period per counter: the whole ledger's when `spend_shared` (each
        counter raised to it, never lowered: what it holds already is not counted twice), else every
        other process's (replacing the previous figure; this process's own spend is counted here)."""
        ...

    async def cache_get(self, cache_key: str, *, tenant: str) -> bytes | None:
        """The answer cached under `cache_key` (`cache_key.cache_key`) by `tenant` (`tenant_of`)."""
        ...

    async def cache_set(self, cache_key: str, value: bytes, ttl_s: float, *, tenant: str) -> None:
        """Cache an answer for `ttl_s`, within `cache.max_entries` and `cache.max_bytes` (an answer larger
        than it is not cached): the memory backend's bound of all answers, a shared store's of `tenant`'s."""
        ...

    def record_response_owner(self, response_id: str, owner: ResponseOwner, ttl_s: float,
                              items: Sequence[str] = ()) -> None:
        """Remember who created `response_id` for `ttl_s`, and that its output `items` (their ids) are its
        tenant's (`tenant_of`) as long. Never waits: a shared store's write runs in the background (bounded:
        over `MAX_PENDING_OWNER_WRITES` in flight, the write is dropped and logged), and `response_owner` of
        the same id, or `unowned_item` of the same tenant, on this replica waits for it."""
        ...

    async def unowned_item(self, tenant: str, item_ids: Sequence[str]) -> str | None:
        """The first of `item_ids` that is not one of `tenant`'s output items (recorded with its responses,
        not expired nor dropped); None when every one is. Asked only for a request that names items."""
        ...

    async def response_owner(self, response_id: str) -> ResponseOwner | None:
        """Who created `response_id`; None when nobody is on record (unknown, expired, or never ours)."""
        ...

    def record_served_name(self, name: str, served: ServedName) -> None:
        """Remember for every process that an answer of `served` carried `name` as its model, for
        `SERVED_NAME_TTL_S` (at most `MAX_MODELS_PER_SERVED_NAME` per name). Never waits: a shared store's
        write runs in the background (bounded: over `MAX_PENDING_NAME_WRITES` in flight, dropped and
        logged). While the shared store is away, this process's memory keeps it: known here only."""
        ...

    async def served_names(self, name: str) -> tuple[ServedName, ...]:
        """What `record_served_name` remembered under `name` (with a shared store: any process's); asked
        only for a name this process cannot resolve."""
        ...

    async def healthy(self) -> bool:
        """For /readyz: False while the shared store is unreachable."""
        ...

    async def warm(self) -> None:
        """Before the first request (bounded, never raises): connect, so the first burst of requests does
        not open every connection at once within its deadline; an unreachable store starts degraded."""
        ...

    async def close(self) -> None: ...


def period_id(period: Period, now: float) -> str:
    """The budget period that `now` (epoch seconds) falls in, in UTC: `2024-05-31` or `2024-05`."""
    stamp = datetime.fromtimestamp(now, UTC)
    return stamp.strftime("%Y-%m-%d") if period == "day" else stamp.strftime("%Y-%m")


def seconds_until_reset(period: Period, now: float) -> int:
    """Whole seconds (at least 1) from `now` until the budget period ends: the next UTC midnight, or the
    first of the next month."""
    stamp = datetime.fromtimestamp(now, UTC)
    start = stamp.replace(hour=0, minute=0, second=0, microsecond=0)
    next_month = (start.replace(day=1) + timedelta(days=32)).replace(day=1)
    end = start + timedelta(days=1) if period == "day" else next_month
    return max(1, math.ceil(end.timestamp() - now))


def create_backend(config: StateConfig, cache: CacheConfig, on_degraded: Callable[[str], None],
                   on_mode: Callable[[bool], None] = lambda _degraded: None) -> StateBackend:
    """Build the configured backend. No I/O happens here: Redis is contacted on first use.
    `on_mode(True)` when a shared backend goes away (limits counted locally), `on_mode(False)` when it is back."""
    # Imported here so that the memory default never imports the redis client library.
    if config.backend == "redis":
        from gateway.state.redis import RedisBackend

        return RedisBackend(config.redis_url, cache, on_degraded, op_timeout_s=config.timeout_ms / 1000,
                            state=config, on_mode=on_mode)
    from gateway.state.memory import MemoryBackend

    return MemoryBackend(cache)
