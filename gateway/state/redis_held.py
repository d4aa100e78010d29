"""Spend while Redis is away (redis.py, docs/scale-out.md): what a replica counted meanwhile, held per Redis
key and added to Redis when it answers again, so an outage forgives no cost; and the figures a budget
counts from meanwhile (`KnownSpend`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from gateway.state.base import Period, period_id

# Adds `usd` to one Redis spend key with its TTL; raises if Redis did not answer
Write = Callable[[str, float, int], Awaitable[None]]


class HeldSpend:
    """Each Redis spend key's amount not yet in Redis, and the TTL it is written with."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[float, int]] = {}

    def hold(self, rkey: str, usd: float, ttl: int) -> None:
        held = self._held.get(rkey, (0.0, ttl))[0]
        self._held[rkey] = (held + usd, ttl)

    def amount(self, rkey: str) -> float:
        return self._held.get(rkey, (0.0, 0))[0]

    async def write(self, write: Write) -> None:
        """One pass over the keys held when it starts, each taken before its write, so two passes at once
        never write one amount twice. Spend held while these writes wait (requests still counted locally)
        is left for the next pass: a pass until none was held chased a steady load, and kept a replica
        counting locally for seconds after Redis answered. A failed write is held again, and raised."""
        for rkey in list(self._held):
            held = self._held.pop(rkey, None)
            if held is None:
                continue
            try:
                await write(rkey, *held)
            except BaseException:
                self.hold(rkey, *held)
                raise


class KnownSpend:
    """Each counter's spend of a period as last known: Redis's last figure, or the ledger's, read while Redis
    was away. Without the ledger's, a replica that had read no counter from Redis (started during the
    outage, or a key it had not served) counted every budget from zero (docs/keys-teams-spend.md, Budgets)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, Period], tuple[str, float]] = {}
        self._ledger: dict[Period, str] = {}  # the period whose ledger figures are in

    def remember(self, key: str, period: Period, now: float, total: float) -> None:
        self._known[(key, period)] = (period_id(period, now), total)

    def base(self, key: str, period: Period, now: float) -> float:
        known = self._known.get((key, period))
        return known[1] if known is not None and known[0] == period_id(period, now) else 0.0

    def take_ledger(self, period: Period, now: float, ledger: Mapping[str, float]) -> None:
        """The whole ledger's spend of the period per counter: each figure raised to it, never lowered
        (Redis's may hold spend whose ledger row is not committed yet)."""
        pid = period_id(period, now)
        for key, usd in ledger.items():
            if self.base(key, period, now) < usd:
                self._known[(key, period)] = (pid, usd)
        self._ledger[period] = pid

    def has_ledger(self, period: Period, now: float) -> bool:
        return self._ledger.get(period) == period_id(period, now)
