"""Two gateway replicas on a real 6-node Redis Cluster (3 primaries, 3 replicas) on loopback: rpm, tpm,
budgets and the response cache are shared; a primary killed under load and a slot migrated under load
cost no request (docs/scale-out.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.crc import key_slot

from gateway.config.types import CacheConfig, StateConfig
from gateway.state import redis_owners
from gateway.state.base import create_backend
from gateway.state.keys import cache_redis_key, rate_key, spend_key
from gateway.state.redis import WARM_CONNECTIONS
from gateway.state.redis_seed import SEED_CHUNK
from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.ports import free_port
from tests.redis_topologies import RedisClusterNodes
from tests.scaleout_load import (
    LOAD_KEY,
    PATH,
    SCRIPTS,
    STREAMS,
    Make,
    StreamLoad,
    admitted_while_shared,
    alternate,
    burst,
    degraded,
    error_code,
    fail_over_under_load,
    poll,
    replicas,
    script_sha,
    sdk,
    spare_keys,
    spares,
    status_of,
)
from tests.state_bounds import (
    ITEMS_PER_TENANT,
    MAX_BYTES,
    MAX_ENTRIES,
    OWNERS_PER_TENANT,
    answers_are_bounded_per_tenant,
    items_are_bounded_per_tenant,
    names_differing_in_braces_count_apart,
    owners_are_bounded_per_tenant,
)

# times a Redis Cluster failover under load: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

# Budgets wide enough that a test machine's CPU contention never flips a replica to local counting where
# a test counts shared admissions exactly; the budget itself is test_state_degraded.py's.
SHARED_MS, FAILOVER_MS = 1000, 200
# 300 operations started at once queue behind each other: on a slow shared machine the last ones passed 1 s
# once (a timeout, not the refusal this test is about, flipped the backend); the refusal flips at once
# whatever the budget, so a wider one leaves the test its point
BURST_MS = 5000
NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterNodes]:
    with RedisClusterNodes() as running:
        yield running


def on_cluster(url: str, timeout_ms: int) -> dict[str, Any]:
    return {"redis_mode": "cluster", "redis_url": url, "timeout_ms": timeout_ms}


def test_two_replicas_share_rpm_tpm_budget_and_cache_on_a_cluster(
        cluster: RedisClusterNodes, upstream: FakeUpstream, make_gateway: Make) -> None:
    keys = [{"name": "c-rpm", "key": "k-rpm", "rpm": 7}, {"name": "c-tpm", "key": "k-tpm", "tpm": 100},
            {"name": "c-budget", "key": "k-budget", "budget_usd": 0.01}, {"name": "c-cache", "key": "k-cache"}]
    gws = replicas(make_gateway, upstream.base_url, on_cluster(cluster.url, SHARED_MS), keys)
    upstream.defaults[PATH] = completion("ok")  # usage: 18 tokens
    statuses = alternate(gws, "k-rpm", 20)
    assert statuses.count(200) == 7, statuses
    # tpm: every answer settles at 18 real tokens; the replicas together admit what one process would
    tpm_ok = [status_of(gws[i % 2], "k-tpm", f"t{i}", max_tokens=10) for i in range(8)].count(200)
    assert tpm_ok in (4, 5), "100 tokens at 18 per answer, less the last one's reservation (~29: its body, max_tokens)"
    # budget: spent through one replica, refused by the other
    assert status_of(gws[0], "k-budget") == 200
    poll(lambda: error_code(gws[1], "k-budget") == "budget_exceeded", "the other replica to see the spend")
    # cache: answered by one replica, a hit on the other
    upstream.enqueue(PATH, completion("cached once"))
    first = sdk(gws[0], "k-cache").chat.completions.create(model="m", messages=[{"role": "user", "content": "c"}])
    second = sdk(gws[1], "k-cache").chat.completions.create(model="m", messages=[{"role": "user", "content": "c"}])
    assert first.choices[0].message.content == second.choices[0].message.content == "cached once"
    assert not any(degraded(g) for g in gws)
    assert sum(g.sample("llm_gateway_state_degraded_total") for g in gws) == 0


def test_a_slot_migrating_under_load_loses_no_request(
        cluster: RedisClusterNodes, upstream: FakeUpstream, make_gateway: Make) -> None:
    gws = replicas(make_gateway, upstream.base_url, on_cluster(cluster.url, SHARED_MS), [LOAD_KEY])
    upstream.defaults[PATH] = text_stream(["a ", "stream"])
    slot = key_slot(rate_key(str(LOAD_KEY["name"]), "rpm", 0).encode())
    source = cluster.primary_of(slot)
    dest = next(s for s in cluster.primaries() if s is not source)
    with StreamLoad(gws, STREAMS) as load:
        load.wait_for_more(20)
        cluster.migrate_slot(slot, dest)
        load.wait_for_more(20)
    assert cluster.primary_of(slot) is dest
    assert load.outcomes and set(load.outcomes) == {200}, load.outcomes
    # every admitted request was counted once, in the shared buckets now on the new owner (a request
    # served locally during the move is counted by `state_degraded_total`, not in Redis)
    node = redis.Redis(port=dest.port)
    counted = sum(int(node.get(k) or 0) for k in node.scan_iter(match="llmgw:rl:{load}:rpm:*"))
    local = sum(g.sample("llm_gateway_state_degraded_total") for g in gws)
    assert len(load.outcomes) - local <= counted <= len(load.outcomes)


def test_killing_the_primary_of_the_limit_slot_under_load(upstream: FakeUpstream, make_gateway: Make) -> None:
    """No 5xx; limits local during the gap (the gauge says so); shared again within 5 s of the new
    primary; the lost node replaced under load. A cluster of its own: this one loses a node."""
    with RedisClusterNodes() as cluster:
        keys = [LOAD_KEY, *spares("after", "k-after", 5)]
        gws = replicas(make_gateway, upstream.base_url, on_cluster(cluster.url, FAILOVER_MS), keys)
        upstream.defaults[PATH] = text_stream(["a ", "stream"])
        slot = key_slot(rate_key(str(LOAD_KEY["name"]), "rpm", 0).encode())
        victim = cluster.primary_of(slot)
        with StreamLoad(gws, STREAMS) as load:
            failover = fail_over_under_load(gws, load, lambda: cluster.kill(victim),
                                            lambda _: cluster.wait_failover(slot, victim))
            victim.start()  # the lost node comes back (its nodes.conf kept) and rejoins as a replica
            cluster.wait_rejoined(victim)
            # a full sync to the rejoined node may stall its primary for a moment: shared again after it
            poll(lambda: not any(degraded(g) for g in gws), "shared counting with the node back", 10)
            load.wait_for_more(20)
        failover.report(load, "cluster")
        assert set(load.outcomes) == {200}, [o for o in load.outcomes if o != 200]
        assert admitted_while_shared(gws, spare_keys("k-after"), 8) == 5, \
            "shared again: the replicas enforce one rpm together"


async def test_a_burst_beyond_the_connection_cap_waits_for_nothing_and_stays_shared(
        cluster: RedisClusterNodes) -> None:
    """More operations at once than connections per node: redis-py's cluster client refuses a connection
    over its cap instead of queueing, which must not flip the backend to local counting."""
    state = StateConfig(backend="redis", redis_mode="cluster", redis_url=cluster.url, timeout_ms=BURST_MS)
    modes, decisions = await burst(state, [f"burst-{i % 3}" for i in range(300)])
    assert modes == [] and all(decision.allowed for decision in decisions)


async def test_operations_waiting_on_redis_go_local_once_one_operation_fails(cluster: RedisClusterNodes) -> None:
    """The circuit: once an operation finds Redis failing, those already waiting on it go local at once
    instead of each waiting out `state.timeout_ms` (here far longer than the test may take). The limit
    slot's primary holds writes (CLIENT PAUSE WRITE: EVALSHA waits, GET answers); a cache read then fails
    at once (a key of the wrong type) and opens the circuit."""
    modes: list[bool] = []
    state = StateConfig(backend="redis", redis_mode="cluster", redis_url=cluster.url, timeout_ms=60_000)
    backend = create_backend(state, CacheConfig(), lambda _reason: None, modes.append)
    wrong = redis.RedisCluster(host="127.0.0.1", port=cluster.servers[0].port)
    wrong.hset(cache_redis_key("-", "wrong-type"), "field", "value")  # GET of a hash: WRONGTYPE, at once
    holder = redis.Redis(port=cluster.primary_of(key_slot(rate_key("held", "rpm", 0).encode())).port)
    try:
        await backend.check_request("held", 10, None, 0, NOW)  # connected, scripts loaded
        holder.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        waiting = asyncio.ensure_future(backend.check_request("held", 10, None, 0, NOW))
        done, _ = await asyncio.wait({waiting}, timeout=0.5)
        assert not done, "the check waits on the paused primary"
        assert await backend.cache_get("wrong-type", tenant="-") is None  # fails, served locally: a miss
        decision, reservation = await asyncio.wait_for(waiting, 20)  # old code: 60 s, then local
        assert decision.allowed and reservation is not None and not reservation.shared and modes == [True]
    finally:
        holder.execute_command("CLIENT", "UNPAUSE")
        wrong.delete(cache_redis_key("-", "wrong-type"))
        await backend.close()


async def test_budget_seeding_through_a_cluster_pipeline(cluster: RedisClusterNodes) -> None:
    """`seed_spend` pipelines one script per counter, chunked, over every slot's primary: each counter is
    raised to the ledger's figure (never lowered), the period's marker set; on an empty script cache too."""
    for primary in cluster.primaries():
        redis.Redis(port=primary.port).script_flush()  # as on a new cluster: the pipeline must load it
    state = StateConfig(backend="redis", redis_mode="cluster", redis_url=cluster.url, timeout_ms=SHARED_MS)
    backend = create_backend(state, CacheConfig(), lambda _reason: None)
    ledger = {f"seed-{i}": round(0.01 * (i + 1), 2) for i in range(SEED_CHUNK + 150)}  # two chunks
    try:
        assert not await backend.spend_seeded("day", NOW)
        await backend.seed_spend("day", NOW, ledger)
        assert await backend.spend_seeded("day", NOW)
        await backend.add_spend("seed-0", "day", 1.0, NOW)  # spent since: seeding again keeps it
        await backend.seed_spend("day", NOW, {"seed-0": 0.5, "seed-1": 5.0})
        spent = {k: await backend.spend(k, "day", NOW) for k in ledger}
    finally:
        await backend.close()
    slots = {key_slot(spend_key(k, "day", NOW).encode()) for k in ledger}
    assert {cluster.primary_of(s).port for s in slots} == {p.port for p in cluster.primaries()}
    expected = {**ledger, "seed-0": 1.01, "seed-1": 5.0}
    assert spent == pytest.approx(expected), "raised to the ledger's figure, never lowered"


async def test_warm_connects_to_every_primary_before_the_first_request(cluster: RedisClusterNodes) -> None:
    """At start (`App.start`), before any request: every script loaded on every primary and a pool of
    connections open to each, so the first burst of requests does not open them all within its deadline
    (it overran it and started the replica degraded); an unreachable Redis starts degraded, at once."""
    for primary in cluster.primaries():
        redis.Redis(port=primary.port).script_flush()
    state = StateConfig(backend="redis", redis_mode="cluster", redis_url=cluster.url, timeout_ms=SHARED_MS)
    modes: list[bool] = []
    backend = create_backend(state, CacheConfig(), lambda _reason: None, modes.append)
    try:
        await backend.warm()
        for primary in cluster.primaries():
            node = redis.Redis(port=primary.port)
            assert node.script_exists(*(script_sha(s) for s in SCRIPTS)) == [True] * len(SCRIPTS)
            assert int(node.info("clients")["connected_clients"]) > WARM_CONNECTIONS
    finally:
        await backend.close()
    nowhere = replace(state, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    unreachable = create_backend(nowhere, CacheConfig(), lambda _reason: None, modes.append)
    try:
        await unreachable.warm()  # never raises (redis-py raised RedisClusterUnreachableError through)
        assert modes == [True] and (await unreachable.check_request("w", 10, None, 0, NOW))[0].allowed
    finally:
        await unreachable.close()


async def test_a_cluster_no_node_of_which_answers_is_redis_away_not_an_error() -> None:
    """redis-py's cluster errors are not all RedisErrors: one that reached the request failed it."""
    modes: list[bool] = []
    state = StateConfig(backend="redis", redis_mode="cluster", redis_url=f"redis://127.0.0.1:{free_port()}/0")
    backend = create_backend(state, CacheConfig(), lambda _reason: None, modes.append)
    try:
        decision, _ = await backend.check_request("nowhere", 10, None, 0, NOW)
        assert decision.allowed and modes == [True] and not await backend.healthy()
    finally:
        await backend.close()


async def test_owners_and_answers_are_bounded_per_tenant_on_a_cluster(
        cluster: RedisClusterNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's script touches a tenant's answers by the tenant's tag (one slot, the answers it drops
    included); an owner's records are in their ids' slots, deleted across slots past the tenant's bound,
    its output items in the tenant's slot beside its ids; names that differ only in braces have keys of
    their own (tests/state_bounds.py)."""
    monkeypatch.setattr(redis_owners, "MAX_RESPONSE_OWNERS_PER_TENANT", OWNERS_PER_TENANT)
    monkeypatch.setattr(redis_owners, "MAX_OWNED_ITEMS_PER_TENANT", ITEMS_PER_TENANT)
    state = StateConfig(backend="redis", redis_mode="cluster", redis_url=cluster.url, timeout_ms=SHARED_MS)
    cache = CacheConfig(max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES)
    modes: list[bool] = []
    first, second = (create_backend(state, cache, lambda _reason: None, modes.append) for _ in range(2))
    raw = AsyncRedisCluster(host="127.0.0.1", port=cluster.primaries()[0].port)
    try:
        await owners_are_bounded_per_tenant(first, second, raw)
        await items_are_bounded_per_tenant(first, second, raw)
        await answers_are_bounded_per_tenant(first, second, raw)
        await names_differing_in_braces_count_apart(first)
        assert modes == [], "every operation went to the cluster"
    finally:
        await raw.aclose()
        await first.close()
        await second.close()
