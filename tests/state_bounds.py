"""What a shared state backend holds for one tenant, bounded (docs/scale-out.md): the same scenarios on a
single Redis (tests/integration/test_state_redis.py) and a Redis Cluster (test_state_cluster.py).
`first` writes, `second` (another replica on the same Redis) reads; `raw` looks at what was written."""

from __future__ import annotations

from typing import Any

from gateway.state.base import ResponseOwner, StateBackend, tenant_of
from gateway.state.keys import cache_keys, cache_redis_key, owned_items_key, owned_key, owner_key

NOW = 1_700_000_040.0
OWNERS_PER_TENANT = 3  # what the tests set MAX_RESPONSE_OWNERS_PER_TENANT to
ITEMS_PER_TENANT = 4  # and MAX_OWNED_ITEMS_PER_TENANT
MAX_ENTRIES, MAX_BYTES = 3, 100  # the backends' cache.max_entries and cache.max_bytes


async def _record(backend: StateBackend, response_id: str, owner: ResponseOwner) -> None:
    backend.record_response_owner(response_id, owner, ttl_s=60)
    # a read on the replica that wrote waits for its write: the writes land one after another
    assert await backend.response_owner(response_id) == owner


async def owners_are_bounded_per_tenant(first: StateBackend, second: StateBackend, raw: Any) -> None:
    """A busy team's oldest ids are dropped past the bound, its newest kept, another tenant's untouched."""
    solo = ResponseOwner("solo")
    await _record(first, "resp_solo", solo)
    busy = [ResponseOwner(f"key-{i % 2}", "team/busy") for i in range(5)]  # two keys of one team
    for i, owner in enumerate(busy):
        await _record(first, f"resp_busy_{i}", owner)
    held = [await second.response_owner(f"resp_busy_{i}") for i in range(5)]
    assert held == [None, None, *busy[2:]], "the team's oldest two dropped, for every replica"
    assert await second.response_owner("resp_solo") == solo, "another tenant's id is not touched"
    index = owned_key(tenant_of(None, "team/busy"))
    assert await raw.zcard(index) == OWNERS_PER_TENANT
    assert await raw.exists(owner_key("resp_busy_0")) == 0, "the record itself is gone from Redis"
    assert 0 < await raw.pttl(index) <= 60_000, "an idle tenant's index goes with its last record"


async def items_are_bounded_per_tenant(first: StateBackend, second: StateBackend, raw: Any) -> None:
    """A response's output items are counted in the script call that counts its id, in a sorted set of its
    tenant's under the same tag (one slot: in a cluster a script over two slots fails); every replica reads
    them; past the bound the tenant's oldest items go, never its response ids nor another tenant's items."""
    team, solo = tenant_of("k0", "team/items"), tenant_of("solo", None)
    first.record_response_owner("resp_solo_items", ResponseOwner("solo"), 60, ["msg_solo"])
    for i in range(3):
        first.record_response_owner(f"resp_items_{i}", ResponseOwner(f"k{i % 2}", "team/items"), 60,
                                    [f"rs_{i}", f"msg_{i}"])
        # a read on the replica that wrote waits for its writes of that tenant in flight
        assert await first.unowned_item(team, [f"rs_{i}", f"msg_{i}"]) is None
    held = [await second.unowned_item(team, [f"{kind}_{i}"]) for i in range(3) for kind in ("rs", "msg")]
    assert held == ["rs_0", "msg_0", None, None, None, None], "the team's oldest two dropped, for every replica"
    assert await second.unowned_item(team, ["rs_2", "msg_solo", "msg_2"]) == "msg_solo", "another tenant's"
    assert await second.unowned_item(solo, ["msg_solo"]) is None, "another tenant's items are not touched"
    assert [await second.response_owner(f"resp_items_{i}") is not None for i in range(3)] == [True] * 3
    index = owned_items_key(team)
    assert index == "llmgw:owned-items:{team:team/items}" and owned_key(team).endswith("{team:team/items}")
    assert await raw.zcard(index) == ITEMS_PER_TENANT
    assert 0 < await raw.pttl(index) <= 60_000, "an idle tenant's items go with its last record"


async def answers_are_bounded_per_tenant(first: StateBackend, second: StateBackend, raw: Any) -> None:
    """An answer over cache.max_bytes is not stored; past max_entries or max_bytes, a tenant's oldest answers
    are dropped, another tenant's kept; a hit is an answer in Redis, read by another replica."""
    await first.cache_set("big", b"x" * (MAX_BYTES + 1), 60, tenant="key:a")
    assert await raw.exists(cache_redis_key("key:a", "big")) == 0, "over cache.max_bytes: not cached"
    await first.cache_set("kept", b"other tenant", 60, tenant="key:b")
    for i in range(5):
        await first.cache_set(f"a{i}", b"answer %d" % i, 60, tenant="key:a")
    hits = [await second.cache_get(f"a{i}", tenant="key:a") for i in range(5)]
    assert hits == [None, None, b"answer 2", b"answer 3", b"answer 4"], "at most cache.max_entries"
    assert await second.cache_get("kept", tenant="key:b") == b"other tenant"
    # bytes: three answers of 40 bytes are 120, over 100: the oldest goes; one written again counts once
    team = tenant_of("key-1", "team/t")
    for i in range(3):
        await first.cache_set(f"c{i}", bytes([65 + i]) * 40, 60, tenant=team)
    await first.cache_set("c2", b"C" * 40, 60, tenant=team)
    hits = [await second.cache_get(f"c{i}", tenant=team) for i in range(3)]
    assert hits == [None, b"B" * 40, b"C" * 40], "at most cache.max_bytes"
    _, index, sizes = cache_keys(team, "c0")
    assert int(await raw.hget(sizes, ":total")) == 80
    assert await raw.zcard(index) == 2
    assert 0 < await raw.pttl(index) <= 60_000 and 0 < await raw.pttl(sizes) <= 60_000


async def names_differing_in_braces_count_apart(backend: StateBackend) -> None:
    """`a{b}` and `a(b)` shared one rate window and one budget (braces became parentheses in the tag)."""
    names = ["team/a{b}", "team/a(b)", "team/a%7Bb%7D", "team/a%b", "team/a}b{"]
    allowed = [(await backend.check_request(name, 1, None, 0, NOW))[0].allowed for name in names]
    assert allowed == [True] * len(names), "each its own rpm of 1"
    for i, name in enumerate(names):
        await backend.add_spend(name, "day", float(i + 1), NOW)
    assert [await backend.spend(name, "day", NOW) for name in names] == [1.0, 2.0, 3.0, 4.0, 5.0]
