"""Sliding-window-counter arithmetic shared by the memory and Redis backends (pure, no I/O).

Why a sliding window counter rather than a fixed minute window: a fixed window lets a client spend its
whole allowance in the last second of one minute and again in the first second of the next (twice the
limit in two seconds). A sliding log is exact but costs memory per request and cannot hold token counts.
The counter keeps two integers per limit (this minute's and the previous minute's) and estimates the
load of the last 60 s as `previous * (1 - elapsed/60) + current`: O(1) memory, no boundary burst.

The Redis Lua script in `lua.py` performs the same comparison with the same operands in the same order,
so both backends take identical decisions for identical inputs (the tests compare them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.state.base import ALLOWED, LimitDecision, LimitName

WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class WindowCounts:
    """The two buckets a decision reads: the current minute's count and the previous minute's."""

    current: int
    previous: int


def minute_of(now: float) -> int:
    """The fixed minute bucket that `now` (epoch seconds) falls in."""
    return int(now // WINDOW_S)


def previous_weight(now: float) -> float:
    """How much of the previous minute still lies inside the 60 s window ending at `now`."""
    return 1.0 - (now % WINDOW_S) / WINDOW_S


def effective_cost(cost: int, limit: int) -> int:
    """Clamp a cost to the limit, so one oversized request still fits into an otherwise idle window.

    Without this a request reserving more tokens than the key's tpm could never pass, whatever the wait;
    the real usage is settled afterwards anyway.
    """
    return max(0, min(cost, limit))


def fits(counts: WindowCounts, cost: int, limit: int, weight: float) -> bool:
    """True when adding `cost` keeps the estimated load of the last 60 s within `limit`.

    A limit of zero (or less) admits nothing, even a zero-cost request.
    """
    return limit > 0 and counts.previous * weight + counts.current + cost <= limit


def retry_after(counts: WindowCounts, cost: int, limit: int, now: float) -> float:
    """Seconds until `cost` would fit, assuming no other traffic meanwhile (an upper bound otherwise).

    Rounded up to the next millisecond plus one, so a client returning exactly then is let in.
    """
    if limit <= 0 or cost > limit:
        return WINDOW_S  # can never fit; tell the client to come back after a full window
    elapsed = now % WINDOW_S
    if counts.current + cost <= limit:
        # Fits in this minute once enough of the previous minute has slid out of the window.
        if counts.previous <= 0:
            return 0.0
        needed = WINDOW_S * (1.0 - (limit - counts.current - cost) / counts.previous)
        wait = max(0.0, needed - elapsed)
    else:
        # Only the next minute helps; there today's count becomes the decaying previous bucket.
        needed = WINDOW_S * (1.0 - (limit - cost) / counts.current)
        wait = (WINDOW_S - elapsed) + max(0.0, needed)
    return math.ceil(wait * 1000.0 + 1.0) / 1000.0


def decide(
    rpm_counts: WindowCounts,
    tpm_counts: WindowCounts,
    rpm: int | None,
    tpm: int | None,
    cost: int,
    now: float,
) -> LimitDecision:
    """Allow one request of `cost` tokens only if it fits both limits; else say which and how long.

    When both limits refuse, the longer wait wins: the client must come back when both have room.
    """
    weight = previous_weight(now)
    refusals: list[tuple[float, LimitName]] = []
    if rpm is not None and not fits(rpm_counts, 1, rpm, weight):
        refusals.append((retry_after(rpm_counts, 1, rpm, now), "rpm"))
    if tpm is not None and not fits(tpm_counts, cost, tpm, weight):
        refusals.append((retry_after(tpm_counts, cost, tpm, now), "tpm"))
    if not refusals:
        return ALLOWED
    wait, name = max(refusals, key=lambda r: r[0])
    return LimitDecision(allowed=False, retry_after_s=wait, limit=name)


def headroom(counts: WindowCounts, limit: int, now: float) -> tuple[int, float]:
    """What the `x-ratelimit-remaining-*` and `-reset-*` headers say of one limit: how much the window
    still admits now (whole units, floored), and the seconds until it admits the whole limit again,
    assuming no more traffic. In a sliding window counter the current minute's count keeps weighing on
    the window through the next minute, so a full reset comes at the end of the next minute; with only
    the previous minute's count left, at the end of this one."""
    load = counts.previous * previous_weight(now) + counts.current
    remaining = max(0, math.floor(limit - load + 1e-9))
    elapsed = now % WINDOW_S
    if counts.current > 0:
        reset = 2 * WINDOW_S - elapsed
    elif counts.previous > 0:
        reset = WINDOW_S - elapsed
    else:
        reset = 0.0
    return remaining, reset
