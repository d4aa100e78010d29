"""The per-deployment circuit breaker (gateway.core.policy.breaker), driven by an injected clock."""

from __future__ import annotations

import pytest

from gateway.core.events import FailureKind
from gateway.core.policy.breaker import BreakerPolicy, BreakerState, CircuitBreaker, counts_against_deployment

K = FailureKind
POLICY = BreakerPolicy(failure_threshold=3, window_s=10.0, cooldown_s=5.0)


def opened_at(t: float) -> CircuitBreaker:
    """A breaker that opened at time t (three failures in a row)."""
    b = CircuitBreaker(POLICY)
    for _ in range(3):
        b.record_failure(t)
    assert b.state(t) is BreakerState.OPEN
    return b


def test_a_new_breaker_is_closed_and_admits_everything() -> None:
    b = CircuitBreaker()
    assert b.state(0.0) is BreakerState.CLOSED
    assert all(b.allow(float(t)) for t in range(100))


def test_opens_at_the_threshold_within_the_window() -> None:
    b = CircuitBreaker(POLICY)
    b.record_failure(1.0)
    b.record_failure(2.0)
    assert (b.state(2.0), b.allow(2.0)) == (BreakerState.CLOSED, True)
    b.record_failure(3.0)
    assert (b.state(3.0), b.allow(3.0)) == (BreakerState.OPEN, False)


def test_failures_outside_the_window_do_not_count() -> None:
    b = CircuitBreaker(POLICY)
    b.record_failure(0.0)
    b.record_failure(5.0)
    b.record_failure(10.0)  # the failure at 0.0 is exactly window_s old: forgotten
    assert b.state(10.0) is BreakerState.CLOSED
    b.record_failure(14.9)  # 5.0, 10.0, 14.9: three within 10 s
    assert b.state(14.9) is BreakerState.OPEN


def test_a_failure_just_inside_the_window_counts() -> None:
    b = CircuitBreaker(POLICY)
    b.record_failure(0.0)
    b.record_failure(0.5)
    b.record_failure(9.999)
    assert b.state(9.999) is BreakerState.OPEN


def test_a_success_breaks_the_run_of_failures() -> None:
    b = CircuitBreaker(POLICY)
    b.record_failure(1.0)
    b.record_failure(2.0)
    b.record_success(2.5)
    b.record_failure(3.0)
    b.record_failure(4.0)
    assert b.state(4.0) is BreakerState.CLOSED
    b.record_failure(5.0)
    assert b.state(5.0) is BreakerState.OPEN


def test_open_refuses_until_the_cooldown_then_admits_exactly_one_probe() -> None:
    b = opened_at(100.0)
    assert not b.allow(104.999)
    assert b.state(104.999) is BreakerState.OPEN
    assert b.allow(105.0)
    assert b.state(105.0) is BreakerState.HALF_OPEN
    assert [b.allow(105.0 + i / 10) for i in range(1, 20)] == [False] * 19


def test_a_successful_probe_closes_and_clears_the_count() -> None:
    b = opened_at(0.0)
    assert b.allow(5.0)
    b.record_success(6.0)
    assert (b.state(6.0), b.allow(6.0), b.allow(6.0)) == (BreakerState.CLOSED, True, True)
    b.record_failure(6.5)
    b.record_failure(7.0)
    assert b.state(7.0) is BreakerState.CLOSED  # the failures that opened it are gone


def test_a_failed_probe_reopens_for_another_cooldown() -> None:
    b = opened_at(0.0)
    assert b.allow(5.0)
    b.record_failure(7.0)
    assert b.state(7.0) is BreakerState.OPEN
    assert not b.allow(11.999)
    assert b.allow(12.0)  # a new probe, cooldown counted from the failed probe
    assert not b.allow(12.0)


def test_results_that_arrive_while_open_are_stale() -> None:
    b = opened_at(0.0)
    b.record_success(1.0)  # admitted before the breaker opened: must not let the flood back in
    assert (b.state(1.0), b.allow(1.0)) == (BreakerState.OPEN, False)
    b.record_failure(4.0)  # nor push the probe further away
    assert b.allow(5.0)


def test_a_lost_probe_is_replaced_after_another_cooldown() -> None:
    b = opened_at(0.0)
    assert b.allow(5.0)  # the probe's request is cancelled and never reports
    assert not b.allow(9.999)
    assert b.allow(10.0)
    assert not b.allow(10.0)
    b.record_success(11.0)
    assert b.state(11.0) is BreakerState.CLOSED


def test_state_is_a_pure_read() -> None:
    b = opened_at(0.0)
    assert b.state(6.0) is BreakerState.HALF_OPEN  # the probe may go
    assert b.state(6.0) is BreakerState.HALF_OPEN
    assert b.allow(6.0)  # reading the state did not use the probe up


def test_threshold_one_opens_on_the_first_failure() -> None:
    b = CircuitBreaker(BreakerPolicy(failure_threshold=1, window_s=1.0, cooldown_s=2.0))
    b.record_failure(0.0)
    assert (b.state(0.0), b.allow(1.0)) == (BreakerState.OPEN, False)


def test_zero_cooldown_never_keeps_a_deployment_out() -> None:
    b = CircuitBreaker(BreakerPolicy(failure_threshold=1, window_s=1.0, cooldown_s=0.0))
    b.record_failure(0.0)
    assert b.state(0.0) is BreakerState.HALF_OPEN
    assert b.allow(0.0) and b.allow(0.0)


def test_default_policy() -> None:
    b = CircuitBreaker()
    for t in range(4):
        b.record_failure(float(t))
    assert b.allow(4.0)
    b.record_failure(4.0)
    assert not b.allow(18.9)
    assert b.allow(19.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"failure_threshold": 0},
        {"window_s": 0.0},
        {"window_s": float("nan")},
        {"cooldown_s": -1.0},
    ],
)
def test_policy_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        BreakerPolicy(**bad)  # type: ignore[arg-type]


COUNTED = {
    K.CONNECT: True,
    K.HTTP_429: True,
    K.HTTP_5XX: True,
    K.UPSTREAM_AUTH: True,
    K.QUOTA: True,
    K.INBAND: True,
    K.EARLY_EOF: True,
    K.MALFORMED: True,
    K.FIRST_TOKEN_TIMEOUT: True,
    K.IDLE_TIMEOUT: True,
    K.TOTAL_TIMEOUT: True,
    K.HTTP_4XX: False,  # the request's fault: a healthy deployment answers the same
    K.CONTEXT_LENGTH: False,
    K.STREAM_REJECTED: False,  # negotiation, learned once
    K.STREAM_OPTIONS_REJECTED: False,
    K.CACHE_KEY_REJECTED: False,  # negotiation too: prompt_cache_key learned once (docs/caching.md)
    K.EMPTY: False,  # it answered: nothing is wrong with it, the next deployment may say more
    K.NOT_FOUND: False,  # an endpoint one API lacks says nothing about the deployment's other API
}


def test_the_counting_table_covers_every_failure_kind() -> None:
    assert set(COUNTED) == set(FailureKind)


@pytest.mark.parametrize(("kind", "counted"), COUNTED.items())
def test_counts_against_deployment(kind: FailureKind, counted: bool) -> None:
    assert counts_against_deployment(kind) is counted
