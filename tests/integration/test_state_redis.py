"""RedisBackend against a real redis-server: shared limits across replicas, settlement, budgets, cache,
and an outage in the middle of a test (kill, stall, restart) with automatic recovery; what it holds for one
tenant bounded as the memory backend's is (docs/scale-out.md: response owners, cached answers), and two
principals whose names differ only in braces never sharing a key (the same scenarios run on a Redis Cluster
in test_state_cluster.py)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from structlog.testing import capture_logs

from gateway.config.types import CacheConfig, StateConfig
from gateway.state import MemoryBackend, create_backend, redis_owners
from gateway.state.base import Reservation
from gateway.state.redis import RedisBackend, cache_redis_key, rate_key, spend_key
from gateway.state.redis_pacing import FIRST_FLAP_WAIT_S
from gateway.state.window import minute_of
from tests.ports import free_port
from tests.redis_server import RedisServer
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

# times the state backend's deadline: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

T0 = 1_700_000_040.0  # the start of a minute; limits take `now` from the caller, not from Redis
MINUTE = minute_of(T0)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        yield running


@pytest.fixture
async def raw(server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client to look at what the backend wrote."""
    client = Redis.from_url(server.url)
    yield client
    await client.aclose()


Factory = Callable[..., RedisBackend]


@pytest.fixture
async def make(server: RedisServer) -> AsyncIterator[Factory]:
    """Builds backends (replicas) on the test server, with a fast recovery probe; closes them after."""
    made: list[RedisBackend] = []

    def factory(on_degraded: Callable[[str], None] | None = None, url: str | None = None,
                cache: CacheConfig | None = None) -> RedisBackend:
        backend = RedisBackend(
            url or server.url,
            cache or CacheConfig(max_entries=100),
            on_degraded or (lambda _reason: None),
            probe_interval_s=0.02,
        )
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        await backend.close()


async def eventually(probe: Callable[[], Awaitable[bool]], within_s: float = 5.0) -> bool:
    """Poll `probe` until it is true, bounded by a deadline (for state another task changes)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < deadline:
        if await probe():
            return True
        await asyncio.sleep(0.01)
    return False


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_helper_uses_a_free_port_restarts_on_it_and_leaves_no_files() -> None:
    server = RedisServer()
    server.start()
    client = redis.Redis(port=server.port, socket_timeout=1, retry=Retry(NoBackoff(), 0))
    try:
        client.set("probe", b"1")
        port = server.port
        server.kill()
        with pytest.raises(redis.ConnectionError):
            client.get("probe")
        server.start()
        assert server.port == port
        assert client.get("probe") is None  # no persistence: a restart starts empty
        server.stop()
        assert [p.name for p in server.directory.iterdir()] == ["redis.log"]
    finally:
        client.close()
        server.close()
    assert not server.directory.exists()


async def test_two_replicas_enforce_one_rpm_together(make: Factory, raw: Redis) -> None:
    replicas = [make(), make()]
    calls = [replicas[i % 2].check_request("team-a", 7, None, 0, T0 + 5) for i in range(30)]
    results = await asyncio.gather(*calls)
    assert sum(decision.allowed for decision, _ in results) == 7
    refused = [decision for decision, _ in results if not decision.allowed]
    assert all(d.limit == "rpm" and d.retry_after_s > 0 for d in refused)
    assert await raw.get(rate_key("team-a", "rpm", MINUTE)) == b"7"  # refusals counted nothing
    assert 0 < await raw.ttl(rate_key("team-a", "rpm", MINUTE)) <= 180


async def test_two_replicas_share_one_tpm(make: Factory, raw: Redis) -> None:
    replicas = [make(), make()]
    calls = [replicas[i % 2].check_request("team-b", None, 100, 30, T0) for i in range(10)]
    results = await asyncio.gather(*calls)
    reservations = [r for d, r in results if d.allowed]
    assert len(reservations) == 3
    assert all(r is not None and r.shared and r.tokens == 30 for r in reservations)
    assert await raw.get(rate_key("team-b", "tpm", MINUTE)) == b"90"


async def test_settle_replaces_the_reservation_by_the_actual_tokens(make: Factory, raw: Redis) -> None:
    replica_a, replica_b = make(), make()
    _, first = await replica_a.check_request("k", None, 1000, 400, T0)
    _, second = await replica_b.check_request("k", None, 1000, 100, T0)
    assert first is not None and second is not None
    await replica_a.settle_tokens(first, 123, T0 + 1)  # the provider reported fewer tokens
    await replica_b.settle_tokens(second, 250, T0 + 2)  # ...or more
    assert await raw.get(rate_key("k", "tpm", MINUTE)) == b"373"
    # a surplus is not handed back to a bucket that has expired (it no longer limits anyone)
    await raw.delete(rate_key("k", "tpm", MINUTE))
    await replica_a.settle_tokens(Reservation("k", MINUTE, 500, shared=True), 10, T0 + 3)
    assert await raw.exists(rate_key("k", "tpm", MINUTE)) == 0


async def test_tokens_used_beyond_a_reservation_count_in_the_minute_the_answer_ends(make: Factory, raw: Redis) -> None:
    """A long stream's reservation bucket has expired when it ends (its TTL is 3 minutes): the tokens it
    used beyond its reservation are counted in the minute it ended, a bucket made with its TTL."""
    backend = make()
    _, reservation = await backend.check_request("k", None, 1000, 10, T0)
    assert reservation is not None
    await raw.delete(rate_key("k", "tpm", MINUTE))  # expired
    await backend.settle_tokens(reservation, 4010, T0 + 300)
    assert await raw.get(rate_key("k", "tpm", MINUTE + 5)) == b"4000"
    assert 0 < await raw.ttl(rate_key("k", "tpm", MINUTE + 5)) <= 180
    assert await raw.exists(rate_key("k", "tpm", MINUTE)) == 0
    refused, _ = await backend.check_request("k", None, 1000, 1, T0 + 301)
    assert refused.limit == "tpm"


async def test_release_takes_a_refused_requests_count_back_from_redis(make: Factory, raw: Redis) -> None:
    replica_a, replica_b = make(), make()
    _, first = await replica_a.check_request("k", 2, 100, 30, T0)
    _, second = await replica_b.check_request("k", 2, 100, 30, T0)
    assert first is not None and second is not None and first.shared
    await replica_b.release(second)
    assert (await raw.get(rate_key("k", "rpm", MINUTE)), await raw.get(rate_key("k", "tpm", MINUTE))) == (b"1", b"30")
    await raw.delete(rate_key("k", "rpm", MINUTE), rate_key("k", "tpm", MINUTE))
    await replica_a.release(first)  # from buckets gone: nothing made again
    assert await raw.exists(rate_key("k", "rpm", MINUTE), rate_key("k", "tpm", MINUTE)) == 0


async def test_a_budget_holds_its_requests_in_flight_over_the_shared_spend(make: Factory) -> None:
    """Each replica holds what its own requests in flight may cost (gateway/state/holds.py) over the spend
    the replicas charged in Redis."""
    replica_a, replica_b = make(), make()
    await replica_b.add_spend("team", "day", 0.5, T0)
    hold = (await replica_a.hold_spend("team", "day", 1.0, 0.6, T0))[0]
    assert hold is not None and (await replica_a.hold_spend("team", "day", 1.0, 0.0, T0))[0] is None
    assert (await replica_b.hold_spend("team", "day", 1.0, 0.0, T0))[0] is not None, "another replica's: not seen"
    await replica_a.charge_spend(hold, 0.25, T0)
    assert await replica_b.spend("team", "day", T0) == pytest.approx(0.75)
    assert (await replica_a.hold_spend("team", "day", 1.0, 0.0, T0))[0] is not None


@pytest.mark.parametrize("skew_s", [0.0, 0.5, 20.0])
async def test_replicas_whose_clocks_disagree_admit_no_more_than_the_window_allows_one_clock(
        make: Factory, skew_s: float) -> None:
    """Each replica counts in the minute of its own clock (limits take `now` from the caller, not Redis's
    TIME): one ahead by `skew_s` enters a minute early, and counts there what the other does not see until
    its own clock gets there. A tenant asking at every moment on both: in any 60 s at most twice the limit
    (what the sliding window counter admits with one clock too: a minute's worth at a minute's end, and
    again as it slides out), and over ten minutes at most the limit a minute, plus one
    (docs/scale-out.md, "Clocks"). Measured: 20 s apart, 13 in the busiest 60 s and 94 in ten minutes
    against 10 and 91 with one clock."""
    replicas = (make(), make())
    limit, admitted, step = 10, [], 0.5
    for i in range(int(600 / step)):
        t = T0 + i * step
        for replica, now in zip(replicas, (t, t + skew_s), strict=True):
            while (await replica.check_request("k", limit, None, 0, now))[0].allowed:
                admitted.append(t)
    busiest = max(sum(1 for x in admitted if start <= x < start + 60) for start in admitted)
    assert busiest <= 2 * limit and len(admitted) <= 11 * limit


async def test_scripts_reload_after_redis_forgets_them(make: Factory, raw: Redis) -> None:
    backend = make()
    assert (await backend.check_request("k", 5, None, 0, T0))[0].allowed
    await raw.script_flush()  # EVALSHA now answers NOSCRIPT; the script must be loaded again
    assert (await backend.check_request("k", 5, None, 0, T0))[0].allowed
    assert await raw.get(rate_key("k", "rpm", MINUTE)) == b"2"
    assert not backend.degraded


async def test_memory_and_redis_take_identical_decisions(make: Factory) -> None:
    """The Lua comparison mirrors window.fits: replay one random workload on both backends."""
    rng = random.Random(20240531)
    memory, shared = MemoryBackend(), make()
    limits = {"a": (5, None), "b": (None, 300), "c": (20, 1000), "d": (3, 50)}
    now, pending, outcomes = T0, [], {True: 0, False: 0}
    for _ in range(600):
        # quarter-second steps make `previous * weight` land on whole numbers, so requests that
        # exactly reach a limit (the `<=` boundary) occur often
        now += rng.choice([0.0, 0.0, 0.0, 0.25, 1.5, 3.75, 15.0])
        key = rng.choice(sorted(limits))
        rpm, tpm = limits[key]
        reserve = rng.choice([0, 10, 25, 50, 100, 400])
        got_m = await memory.check_request(key, rpm, tpm, reserve, now)
        got_r = await shared.check_request(key, rpm, tpm, reserve, now)
        assert got_m[0] == got_r[0]
        outcomes[got_m[0].allowed] += 1
        if got_m[1] is not None and got_r[1] is not None:
            pending.append((got_m[1], got_r[1]))
        if pending and rng.random() < 0.4:
            res_m, res_r = pending.pop(rng.randrange(len(pending)))
            actual = rng.choice([0, 5, 25, 60, 200])
            await memory.settle_tokens(res_m, actual, now)
            await shared.settle_tokens(res_r, actual, now)
    assert min(outcomes.values()) > 100  # the workload exercised both admissions and refusals
    assert not shared.degraded


@pytest.mark.parametrize("period", ["day", "month"])
async def test_budgets_per_utc_period(make: Factory, raw: Redis, period: str) -> None:
    replica_a, replica_b = make(), make()
    jan31, feb1 = epoch("2024-01-31T23:00:00"), epoch("2024-02-01T01:00:00")
    await replica_a.add_spend("team", period, 0.75, jan31)  # type: ignore[arg-type]
    await replica_b.add_spend("team", period, 0.5, jan31)  # type: ignore[arg-type]
    assert await replica_a.spend("team", period, jan31) == pytest.approx(1.25)  # type: ignore[arg-type]
    assert await replica_b.spend("team", period, feb1) == 0.0  # type: ignore[arg-type]
    assert await replica_b.spend("other", period, jan31) == 0.0  # type: ignore[arg-type]
    key = spend_key("team", period, jan31)  # type: ignore[arg-type]
    assert key.endswith("2024-01-31" if period == "day" else "2024-01")
    assert await raw.ttl(key) > 0


async def test_cache_set_get_and_ttl_expiry(make: Factory, raw: Redis) -> None:
    backend = make()
    await backend.cache_set("abc", b'{"answer": 42}', ttl_s=60, tenant="key:k")
    assert await backend.cache_get("abc", tenant="key:k") == b'{"answer": 42}'
    assert await backend.cache_get("nope", tenant="key:k") is None
    assert 0 < await raw.pttl(cache_redis_key("key:k", "abc")) <= 60_000
    await backend.cache_set("short", b"x", ttl_s=0.02, tenant="key:k")

    async def gone() -> bool:
        return await backend.cache_get("short", tenant="key:k") is None

    assert await eventually(gone)


async def test_killed_redis_degrades_to_local_limits_then_recovers(
    server: RedisServer, make: Factory, raw: Redis
) -> None:
    reasons: list[str] = []
    backend = make(reasons.append)
    with capture_logs() as logs:
        assert (await backend.check_request("k", 3, None, 0, T0))[0].allowed
        assert await backend.healthy()
        server.kill()
        allowed = [(await backend.check_request("k", 3, None, 0, T0))[0].allowed for _ in range(5)]
        assert allowed == [True, True, True, False, False]  # limited per replica, never unlimited
        _, local_res = await backend.check_request("t", None, 100, 40, T0)
        assert local_res is not None and not local_res.shared
        await backend.cache_set("c", b"v", 60, tenant="key:k")
        assert await backend.cache_get("c", tenant="key:k") == b"v"
        assert not await backend.healthy()
        assert reasons == ["unreachable"] * 8
        # a key without limits needs no state at all: admitted, no fallback recorded
        assert (await backend.check_request("free", None, None, 50, T0))[0].allowed
        assert len(reasons) == 8

        server.start()
        assert await eventually(backend.healthy)
        assert (await backend.check_request("k2", 3, None, 0, T0))[0].allowed
        await backend.settle_tokens(local_res, 10, T0)  # settled locally, not against Redis

    assert await raw.get(rate_key("k2", "rpm", MINUTE)) == b"1"  # counting is back in Redis
    assert await raw.exists(rate_key("t", "tpm", MINUTE)) == 0
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [w["event"] for w in warnings] == ["state_backend_degraded"]
    assert warnings[0]["reason"] == "unreachable"
    assert [e["event"] for e in logs if e["log_level"] == "info"] == ["state_backend_restored"]


async def test_spend_during_an_outage_reaches_redis_on_recovery(server: RedisServer, make: Factory, raw: Redis) -> None:
    backend = make()
    now = epoch("2024-05-31T12:00:00")
    await backend.add_spend("team", "day", 2.0, now)
    assert await backend.spend("team", "day", now) == pytest.approx(2.0)
    server.kill()
    await backend.add_spend("team", "day", 0.25, now)
    # while degraded: the last figure Redis gave plus what was spent since
    assert await backend.spend("team", "day", now) == pytest.approx(2.25)
    server.start()  # a fresh, empty Redis: only the outage's spend can reach it

    async def flushed() -> bool:
        return await raw.get(spend_key("team", "day", now)) == b"0.25"

    assert await eventually(flushed)
    assert await backend.spend("team", "day", now) == pytest.approx(0.25)


async def test_spend_arriving_all_the_while_neither_holds_recovery_back_nor_is_lost(
        server: RedisServer, make: Factory, raw: Redis) -> None:
    """Requests keep spending while the probe writes what was held: the probe writes one pass and
    switches back (a pass until nothing was held chased them and kept the replica local for seconds);
    what they held meanwhile reaches Redis too, once."""
    backend = make()
    now = epoch("2024-05-31T12:00:00")
    server.kill()
    await backend.add_spend("team", "day", 1.0, now)
    assert backend.degraded
    added, cents = 1.0, 0

    async def spend_until_shared() -> None:
        nonlocal added, cents
        for _ in range(100_000):  # each a loop step; far more than the probe's few round trips take
            if not backend.degraded:
                return
            await backend.add_spend("team", "day", 0.01, now)
            cents += 1
            await asyncio.sleep(0)

    server.start()
    await spend_until_shared()
    assert not backend.degraded, "the probe kept writing while spend kept arriving"
    added += cents * 0.01

    async def all_written() -> bool:
        return float(await raw.get(spend_key("team", "day", now)) or 0) == pytest.approx(added)

    assert cents > 0 and await eventually(all_written)


async def test_a_stalled_redis_times_out_into_local_limits(server: RedisServer, make: Factory) -> None:
    reasons: list[str] = []
    backend = make(reasons.append)
    assert (await backend.check_request("k", 1, None, 0, T0))[0].allowed
    server.pause()  # connections are accepted by the kernel, but nothing answers
    try:
        first, _ = await backend.check_request("k", 1, None, 0, T0)
        second, _ = await backend.check_request("k", 1, None, 0, T0)
        assert (first.allowed, second.allowed) == (True, False)
        assert reasons == ["timeout", "timeout"]
    finally:
        server.resume()
    assert await eventually(backend.healthy)


async def test_a_redis_that_stalls_again_right_after_answering_is_tried_later(server: RedisServer) -> None:
    """A flap (a fallback soon after a recovery) makes the next recovery wait (redis_pacing.py): each
    switch back can admit a limit more, so a Redis that comes and goes is not switched back at once."""
    loop = asyncio.get_running_loop()
    modes: list[tuple[bool, float]] = []
    backend = RedisBackend(server.url, CacheConfig(max_entries=10), probe_interval_s=0.02,
                           on_mode=lambda degraded: modes.append((degraded, loop.time())))
    try:
        with capture_logs() as logs:
            for _ in range(2):
                server.pause()
                try:
                    await backend.check_request("k", 5, None, 0, T0)  # times out: falls back
                finally:
                    server.resume()
                assert await eventually(backend.healthy)
    finally:
        await backend.close()
    fell = [(e["flaps"], e["probe_in_s"]) for e in logs if e["event"] == "state_backend_degraded"]
    assert fell == [(0, 0.02), (1, FIRST_FLAP_WAIT_S)]
    assert [degraded for degraded, _ in modes] == [True, False, True, False]
    assert modes[3][1] - modes[2][1] >= FIRST_FLAP_WAIT_S - 0.01  # the loop's timers may fire a tick early


async def test_logs_never_show_the_redis_password(make: Factory) -> None:
    port = free_port()  # nobody listens there
    url = f"redis://gw-user:s3cret-pw@127.0.0.1:{port}/0"
    backend = make(url=url)
    with capture_logs() as logs:
        assert (await backend.check_request("k", 2, None, 0, T0))[0].allowed
    assert len(logs) == 1
    assert "s3cret-pw" not in repr(logs) and "gw-user" not in repr(logs)
    assert logs[0]["redis"] == f"127.0.0.1:{port}/0"


async def test_create_backend_builds_a_redis_backend(server: RedisServer) -> None:
    backend = create_backend(StateConfig(backend="redis", redis_url=server.url, timeout_ms=1000), CacheConfig(), print)
    try:
        assert isinstance(backend, RedisBackend)
        assert await backend.healthy()
    finally:
        await backend.close()


async def test_response_owners_are_shared_bounded_and_survive_an_outage(
        server: RedisServer, make: Factory, raw: Redis) -> None:
    from gateway.state.base import ResponseOwner
    from gateway.state.redis import owner_key

    first, second = make(), make()
    alice = ResponseOwner("alice", "ml")
    first.record_response_owner("resp_{1}", alice, ttl_s=60)
    # read on the replica that wrote it, at once: it waits for its own write in flight
    assert await first.response_owner("resp_{1}") == alice
    assert await second.response_owner("resp_{1}") == alice, "shared by every replica"
    assert 0 < await raw.pttl(owner_key("resp_{1}")) <= 60_000
    assert owner_key("resp_{1}") == "llmgw:owner:{resp_%7B1%7D}", "one hash tag, braces inside it escaped"
    await raw.set(owner_key("resp_bad"), b"not json")
    assert await second.response_owner("resp_bad") is None, "an unreadable record is no record"
    assert await second.response_owner("resp_none") is None
    server.kill()
    second.record_response_owner("resp_2", alice, ttl_s=60)  # written locally while Redis is away
    assert await second.response_owner("resp_2") == alice


async def test_response_owner_writes_in_flight_are_bounded(make: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.state import redis_owners
    from gateway.state.base import ResponseOwner

    monkeypatch.setattr(redis_owners, "MAX_PENDING_OWNER_WRITES", 1)
    backend = make()
    with capture_logs() as logs:
        backend.record_response_owner("resp_a", ResponseOwner("alice"), ttl_s=60)
        backend.record_response_owner("resp_b", ResponseOwner("alice"), ttl_s=60)  # over the bound: dropped
    assert [e["event"] for e in logs] == ["response_owner_not_recorded"]
    assert await backend.response_owner("resp_a") == ResponseOwner("alice")
    assert await backend.response_owner("resp_b") is None


async def test_output_items_ride_on_the_owner_write_are_read_in_batches_and_survive_an_outage(
        server: RedisServer, make: Factory, raw: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A response's items add no command to its owner's write (the same script call), a request naming
    items reads them in one script call per `ITEMS_PER_READ`, and while Redis is away both run locally."""
    from gateway.state.base import ResponseOwner, tenant_of

    monkeypatch.setattr(redis_owners, "ITEMS_PER_READ", 4)
    first, second = make(), make()
    alice, me = ResponseOwner("alice"), tenant_of("alice", None)
    first.record_response_owner("resp_warm", alice, ttl_s=60)  # the scripts loaded, the pool connected
    assert await first.response_owner("resp_warm") == alice
    assert await second.unowned_item(me, ["msg_0"]) == "msg_0"
    before = await raw.info("commandstats")
    items = [f"msg_{i}" for i in range(9)]
    first.record_response_owner("resp_items", alice, ttl_s=60, items=items)
    assert await first.response_owner("resp_items") == alice
    after = await raw.info("commandstats")
    assert _calls(after, "evalsha") - _calls(before, "evalsha") == 1, "one script call, items and id"
    assert _calls(after, "set") - _calls(before, "set") == 1
    assert await second.unowned_item(me, items) is None
    assert _calls(await raw.info("commandstats"), "evalsha") - _calls(after, "evalsha") == 3, "9 ids, 4 a call"
    assert await second.unowned_item(me, [*items[:6], "msg_other", "msg_1"]) == "msg_other"
    assert await second.unowned_item(tenant_of("bob", None), ["msg_1"]) == "msg_1", "another tenant's"
    server.kill()
    second.record_response_owner("resp_local", alice, ttl_s=60, items=["msg_local"])  # locally, Redis away
    assert await second.unowned_item(me, ["msg_local"]) is None


def _calls(stats: dict[str, Any], command: str) -> int:
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_served_names_are_shared_bounded_and_kept_locally_while_redis_is_away(
        server: RedisServer, make: Factory, raw: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names upstreams reported (docs/agents.md, "Names the gateway gave back"): recorded by one replica in
    the background, read by another; a set per name with a TTL, at most MAX_MODELS_PER_SERVED_NAME models;
    writes in flight bounded; local only while Redis is away."""
    from gateway.state import redis_names
    from gateway.state.base import MAX_MODELS_PER_SERVED_NAME, SERVED_NAME_TTL_S, ServedName
    from gateway.state.keys import served_key

    first, second = make(), make()
    gpt, eu = ServedName("gpt", "gpt-4o"), ServedName("gpt-eu", "gpt-4o")
    assert await second.served_names("gpt-4o-2024-08-06") == ()
    first.record_served_name("gpt-4o-2024-08-06", gpt)
    second.record_served_name("gpt-4o-2024-08-06", eu)
    assert await eventually(lambda: _served_is(second, "gpt-4o-2024-08-06", (gpt, eu)))
    assert 0 < await raw.pttl(served_key("gpt-4o-2024-08-06")) <= SERVED_NAME_TTL_S * 1000
    assert served_key("a{b}") == "llmgw:served:{a%7Bb%7D}", "one hash tag, braces inside it escaped"
    for i in range(MAX_MODELS_PER_SERVED_NAME + 3):
        first.record_served_name("many", ServedName(f"m{i:02}", "up"))
    assert await eventually(lambda: _served_len(second, "many", MAX_MODELS_PER_SERVED_NAME))
    assert await raw.scard(served_key("many")) == MAX_MODELS_PER_SERVED_NAME
    await raw.sadd(served_key("bad"), b"not json", b'["one"]', b'["m", "up"]')
    assert await second.served_names("bad") == (ServedName("m", "up"),), "an unreadable member is left out"
    monkeypatch.setattr(redis_names, "MAX_PENDING_NAME_WRITES", 1)
    with capture_logs() as logs:
        first.record_served_name("snap-a", gpt)
        first.record_served_name("snap-b", gpt)  # over the bound: dropped
    assert [e["event"] for e in logs] == ["served_name_not_recorded"]
    assert await eventually(lambda: _served_is(second, "snap-a", (gpt,)))
    assert await second.served_names("snap-b") == ()
    server.kill()
    second.record_served_name("local-only", gpt)  # written locally while Redis is away
    assert await eventually(lambda: _served_is(second, "local-only", (gpt,)))


async def _served_is(backend: RedisBackend, name: str, expected: tuple[object, ...]) -> bool:
    return await backend.served_names(name) == expected


async def _served_len(backend: RedisBackend, name: str, n: int) -> bool:
    return len(await backend.served_names(name)) == n


# ---- what one tenant holds, bounded (tests/state_bounds.py)

@pytest.fixture
async def replicas(server: RedisServer) -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    """Two replicas; a deadline no busy test machine overruns (a timeout would count locally)."""
    cache = CacheConfig(max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES)
    pair = (RedisBackend(server.url, cache, op_timeout_s=5.0), RedisBackend(server.url, cache, op_timeout_s=5.0))
    yield pair
    for backend in pair:
        assert not backend.degraded, "every operation went to Redis"
        await backend.close()


async def test_response_owners_are_bounded_per_tenant(replicas: tuple[RedisBackend, RedisBackend], raw: Redis,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_owners, "MAX_RESPONSE_OWNERS_PER_TENANT", OWNERS_PER_TENANT)
    await owners_are_bounded_per_tenant(*replicas, raw)


async def test_output_items_are_bounded_per_tenant(replicas: tuple[RedisBackend, RedisBackend], raw: Redis,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_owners, "MAX_OWNED_ITEMS_PER_TENANT", ITEMS_PER_TENANT)
    await items_are_bounded_per_tenant(*replicas, raw)


async def test_cached_answers_are_bounded_per_tenant(replicas: tuple[RedisBackend, RedisBackend], raw: Redis) -> None:
    await answers_are_bounded_per_tenant(*replicas, raw)


async def test_names_differing_only_in_braces_count_apart(replicas: tuple[RedisBackend, RedisBackend]) -> None:
    await names_differing_in_braces_count_apart(replicas[0])
