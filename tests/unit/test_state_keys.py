"""Every Redis key an operation touches lies in one Redis Cluster hash slot (docs/scale-out.md), computed
with redis-py's own CRC16 slot function: a script or multi-key command over two slots fails with
CROSSSLOT in a cluster."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from gateway.state.keys import (
    cache_keys,
    cache_prefix,
    check_keys,
    owned_items_key,
    owned_key,
    owner_key,
    rate_key,
    served_key,
    spend_key,
)
from gateway.state.redis import local_share

NAMES = ["team-a", "", "a{b}c", "{x}", "}{", "{", "}", "key:with:colons", "ünïcode-κλειδί", "x" * 300, "%", "a%7Bb"]
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


@pytest.mark.parametrize("one_key", [owner_key("resp_123"), owner_key("a{b}"), owned_key("team:team-a"),
                                     served_key("gpt-4o-2024-08-06")])
def test_single_key_operations_name_one_key(one_key: str) -> None:
    # the response owner's read, each step of its write, and a served name are single-key operations
    assert one_key.startswith("llmgw:")


@pytest.mark.parametrize("name", NAMES)
def test_caching_an_answer_touches_its_tenants_slot_only(name: str) -> None:
    """The answer, the tenant's index and sizes, and every answer the script may drop (the prefix and a
    cache key): one slot, so lua.CACHE_SET runs in a Redis Cluster; a hit is one GET of the first."""
    keys = [*cache_keys(name, "ab" * 32), cache_prefix(name) + "cd" * 32]
    assert len(set(keys)) == 4
    assert len(slots(keys)) == 1


@pytest.mark.parametrize("name", NAMES)
def test_counting_a_response_and_its_items_touches_its_tenants_slot_only(name: str) -> None:
    """lua.OWN_RESPONSE counts a response id and its output items in one call: the tenant's two sorted sets,
    one slot; lua.OWNED_ITEMS reads the second alone."""
    keys = [owned_key(name), owned_items_key(name)]
    assert len(set(keys)) == 2
    assert len(slots(keys)) == 1


def test_a_brace_in_a_key_name_cannot_move_its_hash_tag() -> None:
    assert key_slot(rate_key("a}b", "rpm", 1).encode()) == key_slot(b"{a%7Db}")


TRICKY = ["a{b}", "a(b)", "a%7Bb%7D", "a%b", "a%25b", "", "()", "%", "%25", "{", "(", "}", ")", "{}", "(){}",
          "%7B", "%%", "a{b", "a(b", "a%7Bb"]


def test_no_two_names_share_a_redis_key() -> None:
    """`a{b}` and `a(b)` were one key (braces became parentheses): two IdP teams, or a config key and
    another, shared rate windows and budgets."""
    for build in (lambda n: rate_key(n, "rpm", 1), lambda n: spend_key(n, "day", NOW), owner_key, served_key):
        assert len({build(name) for name in TRICKY}) == len(TRICKY)


@pytest.mark.parametrize("name", [n for n in NAMES + TRICKY if n and not set(n) & set("{}%")])
def test_a_name_without_braces_or_percent_keeps_its_redis_keys(name: str) -> None:
    """An upgrade resets nobody's rate windows or budgets: a name keeps the key the previous layout gave it
    (braces became parentheses; the empty name, which no counter is, `()`); only names with `{`, `}` or
    `%`, and the empty name, move."""
    old_tag = name.replace("{", "(").replace("}", ")")
    assert rate_key(name, "tpm", 28_333_334) == f"llmgw:rl:{{{old_tag}}}:tpm:28333334"
    assert spend_key(name, "month", NOW) == f"llmgw:spend:{{{old_tag}}}:2023-11"
    assert owner_key(name) == f"llmgw:owner:{{{old_tag}}}"
    assert served_key(name) == f"llmgw:served:{{{old_tag}}}"


def test_the_layout_of_plain_names_is_pinned() -> None:
    assert check_keys("team-a", 5) == ["llmgw:rl:{team-a}:rpm:5", "llmgw:rl:{team-a}:rpm:4",
                                       "llmgw:rl:{team-a}:tpm:5", "llmgw:rl:{team-a}:tpm:4"]
    assert spend_key("team-id/7f3c", "day", NOW) == "llmgw:spend:{team-id/7f3c}:2023-11-14"
    assert owner_key("resp_abc123") == "llmgw:owner:{resp_abc123}"


@pytest.mark.parametrize(("limit", "processes", "share"),
                         [(None, 4, None), (100, 1, 100), (100, 4, 25), (10, 3, 3), (2, 8, 1), (1, 1, 1),
                          (0, 1, 0), (0, 4, 0)])
def test_local_share_divides_a_limit_among_the_processes(limit: int | None, processes: int,
                                                         share: int | None) -> None:
    assert local_share(limit, processes) == share
