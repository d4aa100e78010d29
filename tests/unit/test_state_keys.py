"""Every Redis key an operation touches lies in one Redis Cluster hash slot (docs/scale-out.md), computed
with redis-py's own CRC16 slot function: a script or multi-key command over two slots fails with
CROSSSLOT in a cluster."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from gateway.state.keys import cache_redis_key, check_keys, owner_key, rate_key, served_key, spend_key
from gateway.state.redis import local_share

NAMES = ["team-a", "", "a{b}c", "{x}", "}{", "{", "}", "key:with:colons", "ünïcode-κλειδί", "x" * 300]
NOW = 1_700_000_040.0


def slots(keys: list[str]) -> set[int]:
    return {key_slot(k.encode()) for k in keys}


@pytest.mark.parametrize("name", NAMES)
def test_the_request_check_script_touches_one_slot(name: str) -> None:
    keys = check_keys(name, 28_333_334)
    assert len(set(keys)) == 4
    assert len(slots(keys)) == 1


@pytest.mark.parametrize("name", NAMES)
def test_every_key_of_one_api_key_shares_the_slot_across_minutes_and_periods(name: str) -> None:
    """Settling a reservation (a later minute's bucket), budgets and limits of one key: one slot, so a
    key's state moves as a whole in a resharding."""
    keys = check_keys(name, 28_333_334) + check_keys(name, 28_333_335)
    keys += [rate_key(name, "tpm", 28_333_330), spend_key(name, "day", NOW), spend_key(name, "month", NOW)]
    assert len(slots(keys)) == 1


def test_different_keys_spread_over_slots() -> None:
    """The tag is the key's name, not a constant: keys are spread over the cluster's primaries."""
    assert len(slots([rate_key(f"key-{i}", "rpm", 1) for i in range(50)])) > 40


@pytest.mark.parametrize("one_key", [cache_redis_key("ab" * 32), owner_key("resp_123"), owner_key("a{b}"),
                                     served_key("gpt-4o-2024-08-06")])
def test_single_key_operations_name_one_key(one_key: str) -> None:
    # cache_get/cache_set, the response owner and a served name are single-key operations: any slot is fine
    assert one_key.startswith("llmgw:")


def test_a_brace_in_a_key_name_cannot_move_its_hash_tag() -> None:
    assert key_slot(rate_key("a}b", "rpm", 1).encode()) == key_slot(b"{a)b}")


@pytest.mark.parametrize(("limit", "processes", "share"),
                         [(None, 4, None), (100, 1, 100), (100, 4, 25), (10, 3, 3), (2, 8, 1), (1, 1, 1),
                          (0, 1, 0), (0, 4, 0)])
def test_local_share_divides_a_limit_among_the_processes(limit: int | None, processes: int,
                                                         share: int | None) -> None:
    assert local_share(limit, processes) == share
