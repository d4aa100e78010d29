"""The sliding-window arithmetic: decisions, and Retry-After values a client can rely on."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.state.window import (
    WINDOW_S,
    WindowCounts,
    decide,
    effective_cost,
    fits,
    minute_of,
    previous_weight,
    retry_after,
)

T0 = 1_700_000_040.0  # the start of a minute (1_700_000_040 is divisible by 60)


def counts_at(counts: WindowCounts, now: float, later: float) -> WindowCounts:
    """What the two buckets hold at `later` if no traffic comes after `now`."""
    gap = minute_of(later) - minute_of(now)
    if gap == 0:
        return counts
    if gap == 1:
        return WindowCounts(current=0, previous=counts.current)
    return WindowCounts(current=0, previous=0)


def test_minute_start_gives_the_previous_minute_full_weight() -> None:
    assert T0 % 60 == 0
    assert previous_weight(T0) == 1.0
    assert previous_weight(T0 + 30) == 0.5
    assert minute_of(T0 + 59.999) == minute_of(T0)


def test_the_previous_minute_slides_out_gradually() -> None:
    full_last_minute = WindowCounts(current=0, previous=60)
    assert not fits(full_last_minute, 1, 60, previous_weight(T0))
    # a quarter into the minute, a quarter of last minute's traffic has left the window
    assert fits(WindowCounts(current=14, previous=60), 1, 60, previous_weight(T0 + 15))
    assert not fits(WindowCounts(current=15, previous=60), 1, 60, previous_weight(T0 + 15))


def test_zero_limit_admits_nothing() -> None:
    assert not fits(WindowCounts(0, 0), 0, 0, 1.0)
    assert retry_after(WindowCounts(0, 0), 1, 0, T0) == WINDOW_S


def test_oversized_cost_is_clamped_to_the_limit() -> None:
    assert effective_cost(5000, 1000) == 1000
    assert effective_cost(-3, 1000) == 0
    assert fits(WindowCounts(0, 0), effective_cost(5000, 1000), 1000, 1.0)


def test_decide_reports_the_longer_wait_when_both_limits_refuse() -> None:
    rpm_counts = WindowCounts(current=10, previous=0)  # rpm full until the next minute
    tpm_counts = WindowCounts(current=100, previous=0)
    decision = decide(rpm_counts, tpm_counts, 10, 1000, 5, T0 + 30)
    assert (decision.allowed, decision.limit) == (False, "rpm")
    both = decide(rpm_counts, WindowCounts(current=0, previous=1000), 10, 1000, 5, T0 + 30)
    assert not both.allowed and both.retry_after_s >= decision.retry_after_s
    assert decide(WindowCounts(0, 0), WindowCounts(0, 0), 10, None, 5, T0).allowed


@given(
    current=st.integers(0, 2000),
    previous=st.integers(0, 2000),
    limit=st.integers(1, 1000),
    cost=st.integers(1, 1000),
    offset=st.floats(0, 59.999, allow_nan=False),
)
def test_retry_after_is_the_first_moment_the_request_fits(
    current: int, previous: int, limit: int, cost: int, offset: float
) -> None:
    now = T0 + offset
    counts = WindowCounts(current=current, previous=previous)
    cost = effective_cost(cost, limit)
    if fits(counts, cost, limit, previous_weight(now)):
        return
    wait = retry_after(counts, cost, limit, now)
    assert 0 < wait <= 2 * WINDOW_S + 0.002  # worst case: a full minute must slide out entirely
    later = now + wait
    assert fits(counts_at(counts, now, later), cost, limit, previous_weight(later))
    # ...and not long before: the hint is at most a few milliseconds late
    earlier = now + max(0.0, wait - 0.01)
    if earlier > now:
        assert not fits(counts_at(counts, now, earlier), cost, limit, previous_weight(earlier))
