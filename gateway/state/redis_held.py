"""Spend a replica counted while Redis was away (redis.py, docs/scale-out.md): held per Redis key, added
to Redis when it answers again, so an outage forgives no cost."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

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
