"""Seeding a period's spend counters in Redis from the ledger (docs/scale-out.md): a Redis that restarted
empty would otherwise forgive every key's spend so far. Pipelined in chunks, each round trip bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway.state import lua
from gateway.state.base import Period
from gateway.state.keys import seeded_key, spend_key
from gateway.state.redis_client import RedisLink

SEED_CHUNK = 500  # counters seeded per pipelined round trip


async def seed_counters(link: RedisLink, seed: Any, period: Period, now: float, ledger: Mapping[str, float],
                        ttl_s: int, deadline_s: float, prepare_s: float) -> None:
    """Each counter raised to the ledger's figure (`lua.SEED_SPEND`, registered as `seed`), then the
    period's marker set. Raises what Redis raises: the caller tries again later."""
    items = list(ledger.items())
    # A pipeline does not load a missing script (redis-py's cluster pipeline raises NOSCRIPT): a new
    # or failed-over cluster has none, so load it on every primary first.
    async with asyncio.timeout(prepare_s):
        await link.prepare((lua.SEED_SPEND,), 1)
    for start in range(0, len(items), SEED_CHUNK):
        async with asyncio.timeout(deadline_s * 4):
            async with link.client.pipeline(transaction=False) as pipe:
                for key, usd in items[start:start + SEED_CHUNK]:
                    await seed(keys=[spend_key(key, period, now)], args=[repr(usd), ttl_s], client=pipe)
                await pipe.execute()
    async with asyncio.timeout(deadline_s):
        await link.client.set(seeded_key(period, now), b"1", ex=ttl_s)
