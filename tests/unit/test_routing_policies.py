"""Routing's pure policies (gateway.core.policy.tiers, .latency, .routing; docs/routing.md), issue #59:
tiers first, then ordered, balanced, weighted, latency and cost inside a tier; affinity only among the
policy's first choices. Time is an injected clock: the latency scenarios run 2,000 simulated requests of
scripted TTFTs in a fraction of a second, with nothing slept."""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.types import Deployment, Price
from gateway.core.policy.latency import PUBLISH_EVERY_S, RERANK_S, LatencyBook
from gateway.core.policy.routing import RouteTable, Routing, Signals, hedge_end, plan_order, route, route_session
from gateway.core.policy.tiers import ROUTING_POLICIES

API = "chat"


def dep(name: str, *, tier: int = 0, weight: float = 1.0, price: tuple[float, float] = (0.0, 0.0)) -> Deployment:
    return Deployment(provider="up", model=name, tier=tier, weight=weight, price=Price(*price))


def first_choices(deps: Sequence[Deployment], routing: Routing, n: int, seed: int) -> Counter[int]:
    rand, table = random.Random(seed).random, RouteTable.of(deps)
    return Counter(route(deps, table, routing, Signals({}, rand))[0] for _ in range(n))


# -- weighted ---------------------------------------------------------------------------------------


def test_weighted_70_20_10_over_2000_requests_lands_within_3_points_of_each_share() -> None:
    deps = (dep("a", weight=70), dep("b", weight=20), dep("c", weight=10))
    got = first_choices(deps, "weighted", 2000, seed=59)
    for i, share in enumerate((0.70, 0.20, 0.10)):
        assert abs(got[i] / 2000 - share) <= 0.03, (i, got)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=2, max_size=4).filter(any), st.integers(0, 2**32))
def test_weighted_shares_converge_and_weight_0_is_only_a_fallback(weights: list[int], seed: int) -> None:
    deps = tuple(dep(f"d{i}", weight=w) for i, w in enumerate(weights))
    n = 3000
    got = first_choices(deps, "weighted", n, seed)
    for i, w in enumerate(weights):
        assert abs(got[i] / n - w / sum(weights)) <= 0.05, (weights, got)  # ~6 standard deviations
        if w == 0:
            assert got[i] == 0
    order = route(deps, RouteTable.of(deps), "weighted", Signals({}, random.Random(seed).random))
    zeros = [i for i, w in enumerate(weights) if w == 0]
    assert order[len(order) - len(zeros):] == zeros  # every weight-0 one after every weighted one


@pytest.mark.parametrize("scale", [1e-4, 1e-2, 1.0, 1e6, 1e15, 1e100])
def test_weighted_splits_by_the_shares_at_any_scale_of_the_weights(scale: float) -> None:
    """`weight` is a share (docs/routing.md): 1 and 3 split as 0.0001 and 0.0003 do, and as 1e15 and 3e15.
    The draw's `u ** (1 / weight)` rounded to 0.0 for small weights and to 1.0 for huge ones, and the tie
    went to config order: 0.0001 and 0.0003 split about 80/20, 1e15 and 3e15 28/72, 1e17 and 3e17 100/0."""
    deps = (dep("a", weight=1 * scale), dep("b", weight=3 * scale))
    got = first_choices(deps, "weighted", 4000, seed=7)
    assert abs(got[0] / 4000 - 0.25) <= 0.03, got  # ~4.5 standard deviations


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(ROUTING_POLICIES), st.integers(0, 2**32), st.lists(st.integers(0, 2), min_size=1, max_size=5))
def test_every_policy_is_deterministic_under_a_seeded_random_and_keeps_tiers_in_order(
        routing: Routing, seed: int, tiers: list[int]) -> None:
    deps = tuple(dep(f"d{i}", tier=t, weight=i % 3, price=(i % 2, 1.0)) for i, t in enumerate(tiers))
    if not any(d.weight for d in deps):
        deps = tuple(dep(d.model, tier=d.tier, price=(d.price.input, 1.0)) for d in deps)

    def run() -> list[list[int]]:
        rand, book, out = random.Random(seed).random, LatencyBook(), []
        for step in range(40):
            order = route(deps, RouteTable.of(deps), routing, Signals({}, rand, book, API, step * 0.5))
            book.observe(API, deps[order[0]].label, 0.05 + 0.01 * order[0], step * 0.5)
            out.append(order)
        return out

    runs = run()
    assert runs == run()
    levels = sorted({d.tier for d in deps})
    if routing == "weighted":  # a tier of weight-0 ones only has no first choice: it follows the first that has
        lead = next(t for t in levels if any(d.weight for d in deps if d.tier == t))
        levels = [lead, *(t for t in levels if t < lead), *(t for t in levels if t > lead)]
    tiers = [t for t in levels for d in deps if d.tier == t]
    for order in runs:
        assert sorted(order) == list(range(len(deps)))
        assert [deps[i].tier for i in order] == tiers  # a lower tier always first


# -- tiers and affinity -----------------------------------------------------------------------------


class Breakers:
    def __init__(self) -> None:
        self.down: set[str] = set()

    def allowed(self, label: str) -> bool:
        return label not in self.down


def test_a_later_tier_gets_nothing_while_the_first_serves_and_everything_when_it_is_down() -> None:
    deps = (dep("p0"), dep("p1"), dep("fallback", tier=1))
    br, rand = Breakers(), random.Random(1).random
    for routing in ROUTING_POLICIES:
        firsts = Counter(plan_order(deps, routing, {}, br.allowed, rand)[0] for _ in range(200))
        assert firsts[2] == 0, routing
    br.down = {deps[0].label, deps[1].label}
    for routing in ROUTING_POLICIES:
        assert {plan_order(deps, routing, {}, br.allowed, rand)[0] for _ in range(50)} == {2}, routing


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(ROUTING_POLICIES), st.integers(0, 2**32))
def test_no_session_id_reaches_a_later_tier_a_fallback_only_or_a_dearer_deployment(
        routing: Routing, seed: int) -> None:
    """Issue #55, finding 5: the client chooses its session id; it must not choose a deployment the policy
    would not pick first. Two tiers; in tier 0 a weight-0 and a dearer deployment beside two equal ones."""
    deps = (dep("a", price=(1, 1)), dep("b", price=(1, 1)), dep("zero", weight=0, price=(1, 1)),
            dep("dear", weight=0, price=(9, 9)), dep("last-resort", tier=1, price=(0, 0)))
    table, rand, book = RouteTable.of(deps), random.Random(seed).random, LatencyBook()
    sessions = [random.Random(seed + i).randbytes(16).hex() for i in range(200)]  # 200 random session ids
    allowed = {"ordered": {0}, "weighted": {0, 1}, "cost": {0, 1, 2}, "balanced": {0, 1, 2, 3},
               "latency": {0, 1, 2, 3}}[routing]
    homes = Counter(route(deps, table, routing, Signals({}, rand, book, API), s)[0] for s in sessions)
    assert set(homes) <= allowed, homes
    if len(allowed) > 1:
        assert len(homes) > 1  # affinity still spreads sessions over the first choices


def test_a_tier_of_weight_0_deployments_only_is_a_fallback_behind_the_first_weighted_tier() -> None:
    """`weight: 0` serves only as a fallback (CONTRACT 4.10): a tier with no weight above 0 has no first
    choice, so the first tier that has one goes ahead of it, and it ahead of the tiers after that. No
    session makes its home there. (Tier 0 went first, weight-0 or not.)"""
    deps = (dep("drained-a", weight=0), dep("drained-b", weight=0), dep("live", tier=1, weight=3),
            dep("canary", tier=1, weight=1), dep("spare", tier=1, weight=0), dep("last", tier=2))
    table, rand = RouteTable.of(deps), random.Random(8).random
    firsts = Counter[int]()
    for _ in range(200):
        order = route(deps, table, "weighted", Signals({}, rand))
        assert set(order[:2]) == {2, 3} and order[2:] == [4, 0, 1, 5], order
        firsts[order[0]] += 1
    assert firsts[3] > 20  # still drawn by weight
    sessions = [random.Random(i).randbytes(16).hex() for i in range(200)]
    plans = [route_session(deps, table, "weighted", Signals({}, rand), s) for s in sessions]
    assert {home for _, home in plans} == {2, 3} and all(order[0] == home for order, home in plans)
    for routing in ("ordered", "balanced", "latency"):  # `weight` is `weighted`'s alone: tiers in order
        assert [deps[i].tier for i in route(deps, table, routing, Signals({}, rand))] == [0, 0, 1, 1, 1, 2]


def test_a_hedge_ends_with_its_primarys_tier() -> None:
    deps = (dep("a"), dep("b"), dep("c", tier=1), dep("d", tier=1), dep("e", tier=3))
    assert [hedge_end(deps, [1, 0, 3, 2, 4], p) for p in range(5)] == [2, 2, 4, 4, 5]
    held = (dep("zero", weight=0), dep("w", tier=1), dep("x", tier=1))  # a weight-0 tier behind the first
    assert [hedge_end(held, [2, 1, 0], p) for p in range(3)] == [2, 2, 3]


def _latency_book(deps: Sequence[Deployment], ttft: Sequence[float]) -> LatencyBook:
    book = LatencyBook()
    for d, seconds in zip(deps, ttft, strict=True):
        book.observe(API, d.label, seconds, 0.0)
    return book


@pytest.mark.parametrize("ttft", [(0.500, 0.05, 0.05), (0.05, 0.05, 0.05)])
def test_a_sessions_home_is_its_own_whatever_latency_probe_goes_first(ttft: tuple[float, ...]) -> None:
    """`llm_gateway_affinity_total` compares the serving deployment with the session's home. 30 s on, a
    probe goes to `r` ahead of the home; the home stays the first of the session's ranking of the near
    ones: not `r` if `r` is slow (the plan's first was taken for it), `r` if near and ranked first."""
    deps = (dep("r"), dep("a"), dep("b"))
    table, rand = RouteTable.of(deps), random.Random(2).random
    homes = set()
    for i in range(40):
        session = random.Random(i).randbytes(16).hex()
        book = _latency_book(deps, ttft)
        order, home = route_session(deps, table, "latency", Signals({}, rand, book, API, 1.0), session)
        assert order[0] == home
        probed, probed_home = route_session(deps, table, "latency", Signals({}, rand, book, API, 31.0), session)
        assert probed[0] == 0 and probed_home == home, (order, probed, probed_home)
        assert probed == [0, *(i for i in order if i != 0)]  # the probe first, the rest in the session's order
        homes.add(home)
    assert homes == ({1, 2} if ttft[0] > 0.1 else {0, 1, 2})


def test_under_weighted_sessions_make_their_homes_in_proportion_to_the_weights() -> None:
    """A 5% canary with affinity on is home to about 5% of sessions (not half: a plain rendezvous hash
    would split them evenly), and a session keeps its home whatever the draws."""
    deps = (dep("main", weight=95), dep("canary", weight=5))
    table, rand = RouteTable.of(deps), random.Random(2).random
    sessions = [random.Random(i).randbytes(16).hex() for i in range(2000)]
    homes = [route(deps, table, "weighted", Signals({}, rand), s)[0] for s in sessions]
    assert abs(homes.count(1) / 2000 - 0.05) <= 0.02
    assert homes == [route(deps, table, "weighted", Signals({}, rand), s)[0] for s in sessions]


# -- latency ----------------------------------------------------------------------------------------


class Simulation:
    """Requests every `step` seconds of an injected clock, each routed by `latency` and answered after
    its deployment's scripted TTFT (samples arrive when the first token would, in flight meanwhile)."""

    def __init__(self, ttft: list[float], step: float = 0.01, seed: int = 5) -> None:
        self.deps = tuple(dep(f"d{i}") for i in range(len(ttft)))
        self.table = RouteTable.of(self.deps)
        self.ttft, self.step, self.now = ttft, step, 0.0
        self.book, self.rand = LatencyBook(), random.Random(seed).random
        self.noise = random.Random(seed + 1)
        self.inflight: dict[str, int] = {}
        self.pending: list[tuple[float, int, float]] = []
        self.log: list[tuple[float, int]] = []  # (time, first choice)

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / self.step)):
            self._land()
            i = route(self.deps, self.table, "latency", Signals(self.inflight, self.rand, self.book, API, self.now))[0]
            sample = self.ttft[i] * self.noise.uniform(0.9, 1.1)
            label = self.deps[i].label
            self.inflight[label] = self.inflight.get(label, 0) + 1
            heapq.heappush(self.pending, (self.now + sample, i, sample))
            self.log.append((self.now, i))
            self.now += self.step

    def _land(self) -> None:
        while self.pending and self.pending[0][0] <= self.now:
            at, i, sample = heapq.heappop(self.pending)
            self.inflight[self.deps[i].label] -= 1
            self.book.observe(API, self.deps[i].label, sample, at)

    def share(self, i: int, start: float, end: float) -> float:
        window = [d for t, d in self.log if start <= t < end]
        return sum(1 for d in window if d == i) / len(window)


def test_latency_sends_the_fastest_most_requests_sheds_it_within_10s_and_takes_it_back_within_30s() -> None:
    sim = Simulation([0.050, 0.150, 0.400])  # 100 requests a second
    sim.run(20.0)  # 2,000 requests
    assert sim.share(0, 0.0, 20.0) >= 0.85
    sim.ttft[0] = 0.600  # the fastest slows down
    slowed = sim.now
    sim.run(10.0)
    assert sim.share(1, slowed + 9.0, slowed + 10.0) >= 0.85  # the next fastest took over within 10 s
    sim.run(50.0)
    assert sim.share(0, slowed + 20.0, slowed + 60.0) < 0.05  # only probes while it stays slow
    sim.ttft[0] = 0.050  # it recovers
    recovered = sim.now
    sim.run(30.0)
    assert sim.share(0, recovered + 29.0, recovered + 30.0) >= 0.85  # back within 30 s


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 5), st.sampled_from([0.005, 0.05, 0.5]), st.integers(0, 2**32))
def test_latency_starves_no_deployment_when_all_are_equal(n: int, ttft: float, seed: int) -> None:
    sim = Simulation([ttft] * n, step=0.02, seed=seed % 1000)
    sim.run(10.0)
    got = Counter(i for _, i in sim.log)
    assert min(got[i] for i in range(n)) >= len(sim.log) / n / 2, got


def test_a_deployment_within_the_margin_shares_and_one_beyond_it_does_not() -> None:
    book = LatencyBook()
    deps = (dep("a"), dep("b"), dep("c"), dep("d"))
    for d, seconds in zip(deps, (0.300, 0.325, 0.340, 0.400), strict=True):  # margin: 10% of 300 ms = 30 ms
        book.observe(API, d.label, seconds, 0.0)
    rand, table = random.Random(3).random, RouteTable.of(deps)
    firsts = Counter(route(deps, table, "latency", Signals({}, rand, book, API, 1.0))[0] for _ in range(400))
    assert set(firsts) == {0, 1} and min(firsts.values()) > 150
    assert route(deps, table, "latency", Signals({}, rand, book, API, 1.0))[2:] == [2, 3]  # slower ones: fastest first


def test_a_deployment_without_data_for_30s_gets_one_probe() -> None:
    book = LatencyBook()
    deps = (dep("fast"), dep("slow"))
    book.observe(API, deps[0].label, 0.05, 0.0)
    book.observe(API, deps[1].label, 0.50, 0.0)
    table, rand = RouteTable.of(deps), random.Random(0).random

    def first(now: float) -> int:
        return route(deps, table, "latency", Signals({}, rand, book, API, now))[0]

    assert [first(t) for t in (1.0, 10.0, 29.0)] == [0, 0, 0]
    book.observe(API, deps[0].label, 0.05, 29.0)
    assert [first(30.0), first(30.5), first(45.0)] == [1, 0, 0]  # one probe, then not again for 30 s
    book.observe(API, deps[0].label, 0.05, 50.0)
    assert first(60.5) == 1


def test_a_request_that_cannot_measure_a_probe_is_routed_by_the_ranking_and_leaves_the_probe() -> None:
    book = LatencyBook()
    deps = (dep("fast"), dep("slow"))
    book.observe(API, deps[0].label, 0.05, 0.0)
    book.observe(API, deps[1].label, 0.50, 0.0)
    book.observe(API, deps[0].label, 0.05, 29.0)
    table, rand = RouteTable.of(deps), random.Random(0).random

    def first(now: float, probes: bool) -> int:
        return route(deps, table, "latency", Signals({}, rand, book, API, now, probes=probes))[0]

    assert [first(30.0, False), first(30.5, False)] == [0, 0]  # not streamed: no probe taken
    assert first(31.0, True) == 1  # the next stream carries it


def test_the_average_decays_with_a_30s_half_life_and_a_stale_one_restarts() -> None:
    book = LatencyBook(max_weight=1e9)
    assert book.average(API, "x") is None
    book.observe(API, "x", 1.0, 0.0)
    book.observe(API, "x", 3.0, 29.0)
    older = 0.5 ** (29 / 30)
    assert abs((book.average(API, "x") or 0) - (older * 1.0 + 3.0) / (older + 1)) < 1e-9
    book.observe(API, "x", 7.0, 60.0)  # 31 s after the last sample: that evidence no longer counts
    assert book.average(API, "x") == 7.0
    assert book.average("messages", "x") is None  # per API


# -- cost -------------------------------------------------------------------------------------------


def cost_first(deps: Sequence[Deployment], input_tokens: int, output_tokens: int,
               book: LatencyBook | None = None) -> list[int]:
    rand: Callable[[], float] = random.Random(0).random
    return route(deps, RouteTable.of(deps), "cost", Signals({}, rand, book, API, 0.0, input_tokens, output_tokens))


def test_cost_prices_the_requests_estimated_tokens_and_breaks_ties_by_latency() -> None:
    cheap_in, cheap_out = dep("cheap-in", price=(0.1, 10.0)), dep("cheap-out", price=(5.0, 1.0))
    assert cost_first((cheap_in, cheap_out), 10_000, 10)[0] == 0  # a long prompt, a short answer
    assert cost_first((cheap_in, cheap_out), 100, 4000)[0] == 1
    a, b = dep("a", price=(1, 1)), dep("b", price=(1, 1))
    book = LatencyBook()
    book.observe(API, a.label, 0.9, 0.0)
    book.observe(API, b.label, 0.1, 0.0)
    assert cost_first((a, b), 100, 100, book) == [1, 0]
    assert cost_first((a, b), 100, 100) == [0, 1]  # nothing learned: config order


def test_the_learned_average_is_published_at_most_once_a_second() -> None:
    book = LatencyBook()
    assert book.observe("chat", "p/a", 0.1, 100.0) == 0.1  # the new average, due for its gauge
    assert book.observe("chat", "p/a", 0.3, 100.0 + PUBLISH_EVERY_S / 2) is None  # learned, not published
    assert abs((book.average("chat", "p/a") or 0) - 0.2) < 0.001  # (decayed by half a second)
    assert book.observe("chat", "p/b", 0.5, 100.0 + PUBLISH_EVERY_S / 2) == 0.5  # each deployment on its own
    assert book.observe("chat", "p/a", 0.2, 100.0 + PUBLISH_EVERY_S) == book.average("chat", "p/a")


# -- the ranking a request reads (latency.TierView) --------------------------------------------------


def test_a_sample_reranks_the_tier_only_once_RERANK_S_has_passed() -> None:
    """Routing follows a sample at most RERANK_S late, so a busy tier is not ranked on every request:
    until then requests read the ranking made before it; after it, the new one."""
    book, deps = LatencyBook(), (dep("a"), dep("b"))
    for d in deps:
        book.observe(API, d.label, 0.05, 0.0)
    table, rand = RouteTable.of(deps), random.Random(4).random

    def firsts(now: float) -> set[int]:
        return {route(deps, table, "latency", Signals({}, rand, book, API, now))[0] for _ in range(40)}

    assert firsts(1.0) == {0, 1}  # within the margin: shared
    book.observe(API, deps[0].label, 5.0, 1.0)  # `a` became far slower
    assert firsts(1.0 + RERANK_S / 2) == {0, 1}  # the ranking made at 1.0 still holds
    assert firsts(1.0 + RERANK_S) == {1}  # made again: `a` is beyond the margin now
    assert route(deps, table, "latency", Signals({}, rand, book, API, 1.0 + RERANK_S))[1] == 0  # a fallback


def test_without_a_sample_the_ranking_is_kept_and_with_one_it_is_made_again() -> None:
    book = LatencyBook()
    book.observe(API, "a", 0.05, 0.0)
    book.observe(API, "b", 0.40, 0.0)
    view = book.view(API, ("a", "b"))
    ranking = view.ranking(1.0)
    assert (ranking.near, ranking.rest) == ((0,), (1,))
    assert view.ranking(1.0 + 10 * RERANK_S) is ranking  # nothing new: not made again, however long
    for _ in range(20):  # `b` as fast as `a` now
        book.observe(API, "b", 0.05, 2.0)
    again = view.ranking(2.0)  # the last was made 1 s ago: at once
    assert again is not ranking and (again.near, again.rest) == ((0, 1), ())
    book.observe(API, "a", 5.0, 2.0)
    assert view.ranking(2.0 + RERANK_S / 2) is again  # made less than RERANK_S ago: kept
    assert view.ranking(2.0 + RERANK_S).near == (1,)
