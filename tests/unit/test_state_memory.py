"""MemoryBackend: the embedded default's limits, reservations, budgets and cache."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.config.types import CacheConfig, StateConfig
from gateway.state import MemoryBackend, create_backend
from gateway.state.base import period_id

T0 = 1_700_000_040.0  # the start of a minute


class ManualClock:
    """Monotonic time that moves only when the test says so (cache expiry without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


async def test_rpm_admits_exactly_the_limit_then_says_when_to_return() -> None:
    backend = MemoryBackend()
    results = [await backend.check_request("team-a", 5, None, 0, T0 + 10) for _ in range(8)]
    assert [d.allowed for d, _ in results] == [True] * 5 + [False] * 3
    refused, reservation = results[-1]
    assert refused.limit == "rpm" and reservation is None
    # 50 s to the end of this minute, then 12 s until a fifth of the 5 requests has slid out
    assert refused.retry_after_s == pytest.approx(62.0, abs=0.01)
    early, _ = await backend.check_request("team-a", 5, None, 0, T0 + 10 + refused.retry_after_s - 0.1)
    assert not early.allowed
    decision, _ = await backend.check_request("team-a", 5, None, 0, T0 + 10 + refused.retry_after_s)
    assert decision.allowed


async def test_keys_are_limited_independently() -> None:
    backend = MemoryBackend()
    assert (await backend.check_request("a", 1, None, 0, T0))[0].allowed
    assert not (await backend.check_request("a", 1, None, 0, T0))[0].allowed
    assert (await backend.check_request("b", 1, None, 0, T0))[0].allowed


async def test_sliding_window_prevents_a_double_burst_at_the_minute_boundary() -> None:
    backend = MemoryBackend()
    for _ in range(10):
        assert (await backend.check_request("k", 10, None, 0, T0 + 59))[0].allowed
    # one second later a fixed window would admit 10 more; the sliding window admits none yet
    assert not (await backend.check_request("k", 10, None, 0, T0 + 60))[0].allowed
    # half way through the next minute, half of the burst has slid out
    admitted = [(await backend.check_request("k", 10, None, 0, T0 + 90))[0].allowed for _ in range(8)]
    assert admitted == [True] * 5 + [False] * 3


async def test_a_refused_request_counts_nothing() -> None:
    backend = MemoryBackend()
    first, _ = await backend.check_request("k", 2, 100, 60, T0)
    over_tpm, reservation = await backend.check_request("k", 2, 100, 60, T0)
    assert first.allowed and not over_tpm.allowed
    assert over_tpm.limit == "tpm" and reservation is None
    # had the refused request used an rpm slot, this second allowed request would be refused
    second, _ = await backend.check_request("k", 2, 100, 40, T0)
    assert second.allowed


async def test_unlimited_key_is_always_admitted_and_not_tracked() -> None:
    backend = MemoryBackend()
    for _ in range(100):
        decision, reservation = await backend.check_request("free", None, None, 10_000, T0)
        assert decision.allowed and reservation is None
    assert backend.tracked_keys() == 0


async def test_settle_replaces_the_reservation_by_the_actual_usage() -> None:
    backend = MemoryBackend()
    _, reservation = await backend.check_request("k", None, 100, 80, T0)
    assert reservation is not None and reservation.tokens == 80
    await backend.settle_tokens(reservation, 30, T0)
    # the window now holds 30 tokens: 70 fit, 71 do not
    assert not (await backend.check_request("k", None, 100, 71, T0))[0].allowed
    decision, second = await backend.check_request("k", None, 100, 70, T0)
    assert decision.allowed and second is not None
    await backend.settle_tokens(second, 90, T0)  # the answer ran longer than reserved: 120 counted
    refused, _ = await backend.check_request("k", None, 100, 1, T0)
    assert refused.limit == "tpm"


async def test_settle_after_the_minute_rolled_corrects_the_previous_bucket() -> None:
    backend = MemoryBackend()
    _, reservation = await backend.check_request("k", None, 100, 100, T0 + 50)
    assert reservation is not None
    assert not (await backend.check_request("k", None, 100, 10, T0 + 61))[0].allowed
    await backend.settle_tokens(reservation, 10, T0 + 61)
    assert (await backend.check_request("k", None, 100, 80, T0 + 61))[0].allowed


async def test_tokens_used_beyond_the_reservation_count_in_the_minute_the_answer_ends() -> None:
    """A stream admitted at T0 that ends at T0 + 150 having used 500 tokens more than it reserved: they
    weigh on the window from then (before, they went to T0's bucket, gone from the window)."""
    backend = MemoryBackend()
    _, reservation = await backend.check_request("k", None, 100, 10, T0)
    assert reservation is not None
    await backend.settle_tokens(reservation, 510, T0 + 150)
    refused, _ = await backend.check_request("k", None, 100, 1, T0 + 151)
    assert refused.limit == "tpm" and refused.counts == (0, 0, 500, 0)
    # the key had been idle long enough to be swept: its windows are made again for the charge
    _, late = await backend.check_request("idle", None, 100, 10, T0)
    assert late is not None
    await backend.check_request("other", 1, None, 0, T0 + 400)  # the sweep drops "idle"'s windows
    await backend.settle_tokens(late, 100, T0 + 400)
    assert not (await backend.check_request("idle", None, 100, 11, T0 + 401))[0].allowed


async def test_release_takes_back_a_requests_count_and_its_tokens() -> None:
    backend = MemoryBackend()
    decision, reservation = await backend.check_request("k", 1, 100, 60, T0)
    assert decision.allowed and reservation is not None and (reservation.requests, reservation.tokens) == (1, 60)
    assert not (await backend.check_request("k", 1, 100, 60, T0))[0].allowed
    await backend.release(reservation)
    again, _ = await backend.check_request("k", 1, 100, 100, T0)
    assert again.allowed and again.counts == (1, 0, 100, 0)
    _, rpm_only = await backend.check_request("r", 5, None, 0, T0)
    assert rpm_only is not None and rpm_only.tokens is None  # nothing to settle: settle_tokens leaves it
    await backend.settle_tokens(rpm_only, 10_000, T0)
    assert (await backend.check_request("r", 5, 1, 1, T0))[0].counts == (2, 0, 1, 0)


async def test_a_budget_holds_what_its_requests_in_flight_may_cost() -> None:
    backend = MemoryBackend()
    await backend.add_spend("k", "day", 0.5, T0)
    first = (await backend.hold_spend("k", "day", 1.0, 0.3, T0))[0]
    second = (await backend.hold_spend("k", "day", 1.0, 0.3, T0))[0]
    assert first is not None and second is not None
    # refused with the spend read: under the budget, so held by the requests in flight, not used up
    assert await backend.hold_spend("k", "day", 1.0, 0.3, T0) == (None, 0.5), "0.5 spent and 0.6 held"
    assert await backend.spend("k", "day", T0) == 0.5, "a hold is not spend"
    await backend.charge_spend(first, 0.1, T0)  # cost less than held: 0.6 spent, 0.3 held
    third = (await backend.hold_spend("k", "day", 1.0, 0.3, T0))[0]
    assert third is not None and (await backend.hold_spend("k", "day", 1.0, 0.0, T0))[0] is None
    for hold in (second, third):
        await backend.charge_spend(hold, 0.0, T0)  # refused later, or answered for nothing
    assert backend.holds.counters() == 0 and await backend.spend("k", "day", T0) == pytest.approx(0.6)
    assert (await backend.hold_spend("z", "day", 0.0, 0.0, T0))[0] is None, "a budget of 0 refuses everything"


async def test_a_hold_taken_in_one_period_does_not_weigh_on_the_next() -> None:
    backend = MemoryBackend()
    day1, day2 = epoch("2024-01-31T23:59:00"), epoch("2024-02-01T00:00:30")
    hold = (await backend.hold_spend("k", "month", 1.0, 1.0, day1))[0]
    assert hold is not None and (await backend.hold_spend("k", "month", 1.0, 0.0, day1))[0] is None
    february = (await backend.hold_spend("k", "month", 1.0, 0.9, day2))[0]
    assert february is not None, "February starts at zero"
    await backend.charge_spend(hold, 0.2, day2)  # charged when it ends: in February; its hold forgotten
    assert await backend.spend("k", "month", day2) == pytest.approx(0.2)
    assert (await backend.hold_spend("k", "month", 1.0, 0.0, day2))[0] is None, "0.2 spent and 0.9 held"
    await backend.charge_spend(february, 0.0, day2)
    assert backend.holds.counters() == 0


async def test_oversized_reservation_is_clamped_and_zero_tpm_admits_nothing() -> None:
    backend = MemoryBackend()
    decision, reservation = await backend.check_request("k", None, 1000, 50_000, T0)
    assert decision.allowed and reservation is not None and reservation.tokens == 1000
    refused, _ = await backend.check_request("z", None, 0, 0, T0)
    assert not refused.allowed and refused.limit == "tpm"


async def test_idle_keys_are_pruned_so_memory_stays_bounded() -> None:
    backend = MemoryBackend()
    for i in range(50):
        await backend.check_request(f"key-{i}", 10, None, 0, T0)
    assert backend.tracked_keys() == 50
    await backend.check_request("fresh", 10, None, 0, T0 + 180)
    assert backend.tracked_keys() == 1


@pytest.mark.parametrize(
    ("period", "same_period", "next_period"),
    [
        ("day", "2024-01-31T23:59:59", "2024-02-01T00:00:00"),
        ("month", "2024-01-01T00:00:00", "2024-02-01T00:00:00"),
    ],
)
async def test_spend_accumulates_per_utc_period(period: str, same_period: str, next_period: str) -> None:
    backend = MemoryBackend()
    start = epoch("2024-01-31T08:00:00")
    await backend.add_spend("k", period, 1.25, start)  # type: ignore[arg-type]
    await backend.add_spend("k", period, 0.5, epoch(same_period))  # type: ignore[arg-type]
    assert await backend.spend("k", period, start) == pytest.approx(1.75)  # type: ignore[arg-type]
    assert await backend.spend("other", period, start) == 0.0  # type: ignore[arg-type]
    assert await backend.spend("k", period, epoch(next_period)) == 0.0  # type: ignore[arg-type]
    await backend.add_spend("k", period, 2.0, epoch(next_period))  # type: ignore[arg-type]
    assert await backend.spend("k", period, epoch(next_period)) == pytest.approx(2.0)  # type: ignore[arg-type]


async def test_day_and_month_are_tracked_separately() -> None:
    backend = MemoryBackend()
    await backend.add_spend("k", "day", 3.0, epoch("2024-03-10T12:00:00"))
    await backend.add_spend("k", "month", 7.0, epoch("2024-03-10T12:00:00"))
    assert await backend.spend("k", "day", epoch("2024-03-10T13:00:00")) == pytest.approx(3.0)
    assert await backend.spend("k", "month", epoch("2024-03-25T13:00:00")) == pytest.approx(7.0)


def test_period_ids_are_utc() -> None:
    # 23:30 UTC on the last day of January, whatever the machine's timezone
    now = epoch("2024-01-31T23:30:00")
    assert period_id("day", now) == "2024-01-31"
    assert period_id("month", now) == "2024-01"


async def test_cache_set_get_and_expiry_on_a_manual_clock() -> None:
    clock = ManualClock()
    backend = MemoryBackend(CacheConfig(max_entries=10), clock=clock)
    await backend.cache_set("a", b"answer", ttl_s=5.0)
    assert await backend.cache_get("a") == b"answer"
    assert await backend.cache_get("missing") is None
    clock.now += 4.999
    assert await backend.cache_get("a") == b"answer"
    clock.now += 0.001
    assert await backend.cache_get("a") is None
    assert backend.cache_len() == 0
    await backend.cache_set("b", b"never stored", ttl_s=0)
    assert await backend.cache_get("b") is None


async def test_cache_evicts_the_least_recently_used_entry() -> None:
    backend = MemoryBackend(CacheConfig(max_entries=2))
    await backend.cache_set("a", b"1", 60)
    await backend.cache_set("b", b"2", 60)
    assert await backend.cache_get("a") == b"1"  # "a" is now the most recently used
    await backend.cache_set("c", b"3", 60)
    assert backend.cache_len() == 2
    assert await backend.cache_get("b") is None
    assert await backend.cache_get("a") == b"1"
    assert await backend.cache_get("c") == b"3"


async def test_create_backend_defaults_to_memory_and_is_healthy() -> None:
    calls: list[str] = []
    backend = create_backend(StateConfig(), CacheConfig(), calls.append)
    assert isinstance(backend, MemoryBackend)
    assert await backend.healthy()
    await backend.close()
    assert calls == []


async def test_cache_holds_a_bounded_number_of_bytes() -> None:
    """Entries are bounded by bytes as well as by count: an answer may be up to 32 MiB (a Responses object
    echoes the request's `instructions`), so 10,000 entries alone would let one client's answers fill the
    process's memory (docs/extensions.md, `cache.max_bytes`)."""
    backend = MemoryBackend(CacheConfig())
    big = b"x" * (1 << 20)  # one object: the test itself holds 1 MiB, whatever the cache keeps
    for i in range(300):
        await backend.cache_set(f"answer-{i}", big, 60)
    assert await backend.cache_get("answer-299") == big
    assert await backend.cache_get("answer-0") is None, "the oldest went: 300 MiB is over the default bound"
    assert backend.cache_len() * len(big) <= 256 << 20


async def test_response_owners_expire_and_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.state import memory
    from gateway.state.base import ResponseOwner

    clock = ManualClock()
    backend = MemoryBackend(clock=clock)
    alice = ResponseOwner("alice", "ml")
    backend.record_response_owner("resp_1", alice, ttl_s=60)
    assert await backend.response_owner("resp_1") == alice
    assert alice.admits("alice", None) and alice.admits("bob", "ml") and not alice.admits("bob", None)
    assert not ResponseOwner("carol").admits("dave", None), "no team shares nothing"
    clock.now += 60
    assert await backend.response_owner("resp_1") is None, "expired: unknown"
    monkeypatch.setattr(memory, "MAX_RESPONSE_OWNERS", 3)
    for i in range(5):
        backend.record_response_owner(f"resp_{i}", alice, ttl_s=60)
    assert [await backend.response_owner(f"resp_{i}") for i in range(5)] == [None, None, alice, alice, alice]


async def test_one_tenant_cannot_evict_anothers_response_owners() -> None:
    """However many responses one key (or team) stores, it pushes out only its own oldest ids: another
    tenant's id stays known (docs/responses-bridge.md, Ownership)."""
    from gateway.state import memory
    from gateway.state.base import ResponseOwner

    backend = MemoryBackend(clock=ManualClock())
    victim, busy, teammate = ResponseOwner("victim"), ResponseOwner("busy", "ml"), ResponseOwner("mate", "ml")
    backend.record_response_owner("resp_victim", victim, ttl_s=60)
    for i in range(memory.MAX_RESPONSE_OWNERS):
        backend.record_response_owner(f"resp_busy_{i}", busy if i % 2 else teammate, ttl_s=60)
    assert await backend.response_owner("resp_victim") == victim
    last = memory.MAX_RESPONSE_OWNERS - 1
    assert await backend.response_owner(f"resp_busy_{last}") == busy, "its newest ids stay known"
    assert await backend.response_owner("resp_busy_0") is None, "its oldest went: a team shares one quota"
    assert backend.response_owners_held() <= memory.MAX_RESPONSE_OWNERS_PER_TENANT + 1


async def test_output_items_belong_to_their_tenant_and_expire_with_their_response() -> None:
    """A response's output items are recorded with it, for its tenant (its team, else its key): every
    key of the team has them, no other tenant does, and they expire with the response's record."""
    from gateway.state.base import ResponseOwner, tenant_of

    clock = ManualClock()
    backend = MemoryBackend(clock=clock)
    team, solo = tenant_of("alice", "ml"), tenant_of("bob", None)
    backend.record_response_owner("resp_1", ResponseOwner("alice", "ml"), ttl_s=60, items=["msg_1", "fc_1"])
    backend.record_response_owner("resp_2", ResponseOwner("bob"), ttl_s=60, items=["msg_2"])
    assert await backend.unowned_item(team, ["msg_1", "fc_1"]) is None
    assert await backend.unowned_item(team, ["msg_1", "msg_2", "fc_1"]) == "msg_2", "the first not its own"
    assert await backend.unowned_item(solo, ["msg_2"]) is None
    assert await backend.unowned_item(solo, ["msg_1"]) == "msg_1"
    assert await backend.unowned_item(tenant_of("carol", None), ["msg_never"]) == "msg_never"
    clock.now += 59
    assert await backend.unowned_item(team, ["fc_1"]) is None
    clock.now += 1
    assert await backend.unowned_item(team, ["fc_1"]) == "fc_1", "expired with its response"
    assert await backend.response_owner("resp_1") is None


async def test_output_items_are_bounded_per_tenant_and_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tenant's items past `MAX_OWNED_ITEMS_PER_TENANT` drop its own oldest, never another tenant's; past
    `MAX_OWNED_ITEMS` the oldest of all go. Counted apart from the response ids, which stay known."""
    from gateway.state import memory
    from gateway.state.base import ResponseOwner, tenant_of

    monkeypatch.setattr(memory, "MAX_OWNED_ITEMS_PER_TENANT", 4)
    monkeypatch.setattr(memory, "MAX_OWNED_ITEMS", 6)
    backend = MemoryBackend(clock=ManualClock())
    victim, busy = ResponseOwner("victim"), ResponseOwner("busy", "ml")
    backend.record_response_owner("resp_v", victim, ttl_s=60, items=["msg_v"])
    for i in range(3):
        backend.record_response_owner(f"resp_{i}", busy, ttl_s=60, items=[f"rs_{i}", f"msg_{i}"])
    ml = tenant_of("busy", "ml")
    held = [await backend.unowned_item(ml, [f"{kind}_{i}"]) for i in range(3) for kind in ("rs", "msg")]
    assert held == ["rs_0", "msg_0", None, None, None, None], "its own two oldest went"
    assert await backend.unowned_item(tenant_of("victim", None), ["msg_v"]) is None, "another tenant's stay"
    assert [await backend.response_owner(f"resp_{i}") for i in range(3)] == [busy] * 3, "ids are counted apart"
    for i in range(3):
        backend.record_response_owner(f"resp_o{i}", ResponseOwner(f"other{i}"), ttl_s=60, items=[f"msg_o{i}"])
    assert backend.owned_items_held() == 6
    assert await backend.unowned_item(tenant_of("victim", None), ["msg_v"]) == "msg_v", "the oldest of all"


async def test_served_names_are_kept_per_process_expire_and_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory backend's served names (docs/agents.md, "Names the gateway gave back"): this process's
    own, as the Redis backend's fallback keeps them while Redis is away; bounded per name and in all."""
    from gateway.state import memory
    from gateway.state.base import MAX_MODELS_PER_SERVED_NAME, SERVED_NAME_TTL_S, ServedName

    clock = ManualClock()
    backend = MemoryBackend(clock=clock)
    a, b = ServedName("gpt", "gpt-4o"), ServedName("gpt-eu", "gpt-4o")
    assert await backend.served_names("gpt-4o-2024-08-06") == ()
    backend.record_served_name("gpt-4o-2024-08-06", a)
    backend.record_served_name("gpt-4o-2024-08-06", a)
    backend.record_served_name("gpt-4o-2024-08-06", b)
    assert await backend.served_names("gpt-4o-2024-08-06") == (a, b)
    for i in range(MAX_MODELS_PER_SERVED_NAME + 3):
        backend.record_served_name("many", ServedName(f"m{i}", "up"))
    assert len(await backend.served_names("many")) == MAX_MODELS_PER_SERVED_NAME
    clock.now += SERVED_NAME_TTL_S - 1
    backend.record_served_name("many", ServedName("m0", "up"))  # recorded again: kept from now
    clock.now += 1
    assert await backend.served_names("gpt-4o-2024-08-06") == (), "expired"
    assert len(await backend.served_names("many")) == MAX_MODELS_PER_SERVED_NAME
    monkeypatch.setattr(memory, "MAX_SERVED_NAMES", 3)
    for i in range(5):
        backend.record_served_name(f"snap-{i}", a)
    assert [await backend.served_names(f"snap-{i}") for i in range(5)] == [(), (), (a,), (a,), (a,)]
    await backend.close()
    assert await backend.served_names("snap-4") == ()
