"""HeldSpend (gateway/state/redis_held.py): the spend a replica counted while Redis was away, written back
in passes that end, never twice, and never lose a failed write."""

from __future__ import annotations

import asyncio

import pytest

from gateway.state.redis_held import HeldSpend


async def test_a_pass_ends_though_spend_keeps_arriving_and_leaves_it_held() -> None:
    held = HeldSpend()
    held.hold("a", 1.0, 60)
    held.hold("b", 2.0, 60)
    written: list[tuple[str, float]] = []

    async def write(rkey: str, usd: float, _ttl: int) -> None:
        held.hold(rkey, 0.5, 60)  # a request counted locally while this write waits
        await asyncio.sleep(0)
        written.append((rkey, usd))

    await held.write(write)
    assert written == [("a", 1.0), ("b", 2.0)]
    assert (held.amount("a"), held.amount("b")) == (0.5, 0.5)  # for the next pass, not this one's


async def test_two_passes_at_once_write_each_amount_once() -> None:
    held = HeldSpend()
    for key in "abc":
        held.hold(key, 1.0, 60)
    written: list[str] = []

    async def write(rkey: str, _usd: float, _ttl: int) -> None:
        await asyncio.sleep(0)
        written.append(rkey)

    await asyncio.gather(held.write(write), held.write(write))
    assert sorted(written) == ["a", "b", "c"]
    assert held.amount("a") == 0.0


async def test_a_failed_write_is_held_again_with_what_arrived_meanwhile() -> None:
    held = HeldSpend()
    held.hold("a", 1.0, 60)
    held.hold("b", 2.0, 120)
    ttls: list[int] = []

    async def write(rkey: str, _usd: float, ttl: int) -> None:
        ttls.append(ttl)
        held.hold(rkey, 0.25, ttl)
        raise ConnectionError("away")

    with pytest.raises(ConnectionError):
        await held.write(write)
    assert (held.amount("a"), held.amount("b")) == (1.25, 2.0)

    async def record(rkey: str, usd: float, ttl: int) -> None:
        ttls.append(ttl)
        assert (rkey, usd) in {("a", 1.25), ("b", 2.0)}

    await held.write(record)
    assert ttls[0] == 60 and sorted(ttls[1:]) == [60, 120] and held.amount("a") == held.amount("b") == 0.0
