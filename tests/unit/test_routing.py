"""The order a request tries deployments (gateway.core.policy.routing), with real circuit breakers."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from gateway.config.types import Deployment
from gateway.core.policy.breaker import BreakerPolicy, BreakerState, CircuitBreaker
from gateway.core.policy.routing import candidate_order, iter_plan, plan_order

DEPLOYMENTS = (
    Deployment(provider="openai", model="gpt-4o-mini"),
    Deployment(provider="azure-eu", model="gpt-4o-mini-eu"),
    Deployment(provider="azure-us", model="gpt-4o-mini-us"),
)
A, B, C = (d.label for d in DEPLOYMENTS)
POLICY = BreakerPolicy(failure_threshold=2, window_s=10.0, cooldown_s=5.0)


class Breakers:
    """One real breaker per label, and a record of every allow() the routing asked."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.by_label = {label: CircuitBreaker(POLICY) for label in labels}
        self.asked: list[str] = []
        self.now = 0.0

    def allowed(self, label: str) -> bool:
        self.asked.append(label)
        return self.by_label[label].allow(self.now)

    def trip(self, label: str) -> None:
        for _ in range(POLICY.failure_threshold):
            self.by_label[label].record_failure(self.now)


def draws(*values: float) -> Callable[[], float]:
    it = itertools.cycle(values)
    return lambda: next(it)


def test_ordered_is_config_order() -> None:
    br = Breakers([A, B, C])
    assert plan_order(DEPLOYMENTS, "ordered", {A: 9, B: 0}, br.allowed, draws(0.5)) == [0, 1, 2]


def test_ordered_skips_open_breakers() -> None:
    br = Breakers([A, B, C])
    br.trip(A)
    assert plan_order(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5)) == [1, 2]
    br.trip(C)
    assert plan_order(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5)) == [1]


def test_balanced_prefers_least_in_flight() -> None:
    br = Breakers([A, B, C])
    inflight = {A: 7, B: 2, C: 4}
    assert plan_order(DEPLOYMENTS, "balanced", inflight, br.allowed, draws(0.5)) == [1, 2, 0]


def test_balanced_counts_a_missing_label_as_idle() -> None:
    br = Breakers([A, B, C])
    assert plan_order(DEPLOYMENTS, "balanced", {A: 1, B: 1}, br.allowed, draws(0.5)) == [2, 0, 1]


def test_balanced_breaks_ties_with_the_random_source() -> None:
    br = Breakers([A, B, C])
    inflight = {A: 1, B: 1, C: 1}
    assert plan_order(DEPLOYMENTS, "balanced", inflight, br.allowed, draws(0.9, 0.1, 0.5)) == [1, 2, 0]
    assert plan_order(DEPLOYMENTS, "balanced", inflight, br.allowed, draws(0.2, 0.8, 0.1)) == [2, 0, 1]
    # Equal draws keep config order, so a constant source is deterministic.
    assert plan_order(DEPLOYMENTS, "balanced", inflight, br.allowed, draws(0.5)) == [0, 1, 2]


def test_balanced_ties_only_reorder_equals() -> None:
    inflight = {A: 3, B: 0, C: 0}
    assert candidate_order(DEPLOYMENTS, "balanced", inflight, draws(0.0, 0.9, 0.1)) == [2, 1, 0]


def test_balanced_skips_open_breakers() -> None:
    br = Breakers([A, B, C])
    br.trip(B)
    assert plan_order(DEPLOYMENTS, "balanced", {A: 5, B: 0, C: 1}, br.allowed, draws(0.5)) == [2, 0]


def test_every_breaker_open_fails_fast_then_a_probe_goes() -> None:
    br = Breakers([A, B, C])
    for label in (A, B, C):
        br.trip(label)
    assert plan_order(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5)) == []
    assert plan_order(DEPLOYMENTS, "balanced", {}, br.allowed, draws(0.5)) == []
    br.now = 5.0  # cooldown over: each deployment admits one probe
    assert plan_order(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5)) == [0, 1, 2]
    assert plan_order(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5)) == []  # probes in flight
    br.by_label[B].record_success(5.5)
    assert plan_order(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5)) == [1]


def test_allowed_is_asked_once_per_deployment() -> None:
    br = Breakers([A, B, C])
    plan_order(DEPLOYMENTS, "balanced", {B: 1}, br.allowed, draws(0.5))
    assert sorted(br.asked) == sorted([A, B, C])


def test_iter_plan_asks_only_when_the_caller_gets_there() -> None:
    br = Breakers([A, B, C])
    plan = iter_plan(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5))
    assert br.asked == []
    assert next(plan) == 0
    assert br.asked == [A]
    assert next(plan) == 1
    assert br.asked == [A, B]


def test_a_probe_is_not_used_up_by_a_fallback_the_request_never_reaches() -> None:
    br = Breakers([A, B, C])
    br.trip(B)
    br.now = 5.0  # B may be probed
    first = iter_plan(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5))
    assert next(first) == 0  # A serves this request; the loop stops here
    assert br.by_label[B].state(br.now) is BreakerState.HALF_OPEN
    # A fails on the next request: the fallback B still gets its probe.
    second = iter_plan(DEPLOYMENTS, "ordered", {}, br.allowed, draws(0.5))
    assert list(second) == [0, 1, 2]


def test_iter_plan_fixes_the_order_when_created() -> None:
    br = Breakers([A, B, C])
    inflight = {A: 0, B: 1, C: 2}
    plan = iter_plan(DEPLOYMENTS, "balanced", inflight, br.allowed, draws(0.5))
    inflight[A] = 10  # this request's own attempt on A, say: its fallbacks do not reshuffle
    assert list(plan) == [0, 1, 2]


def test_no_deployments_no_plan() -> None:
    br = Breakers([])
    assert plan_order((), "balanced", {}, br.allowed, draws(0.5)) == []
