"""A circuit breaker per deployment: take one that keeps failing out of rotation (docs/extensions.md,
"Failure semantics").

CLOSED admits everything and counts failures; `failure_threshold` failures with no success between
them, each younger than `window_s`, open it. OPEN admits nothing for `cooldown_s`; then the next
`allow()` moves it to HALF_OPEN and admits exactly one probe. The probe's success closes it; its
failure opens it for another cooldown.

Time comes in as `now` (a monotonic clock, seconds) so the breaker is pure and tested by feeding values.
One instance per deployment per process; mutable and not thread-safe: use it from the event loop only.
Breaker state stays per replica (DESIGN: learn-once facts and breakers are local).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from gateway.core.events import FailureKind


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    failure_threshold: int = 5
    window_s: float = 30.0
    cooldown_s: float = 15.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if not self.window_s > 0:
            raise ValueError("window_s must be positive")
        if not self.cooldown_s >= 0:
            raise ValueError("cooldown_s must not be negative")


# The deployment's fault: it could not be reached, was overloaded, broke the stream, stalled, or its
# account or credentials fail. Not its fault: the request (4xx, context length) or protocol
# negotiation (learn-once fallbacks), which a healthy deployment answers the same way.
_COUNTED: frozenset[FailureKind] = frozenset(
    {
        FailureKind.CONNECT,
        FailureKind.HTTP_429,
        FailureKind.HTTP_5XX,
        FailureKind.UPSTREAM_AUTH,
        FailureKind.QUOTA,
        FailureKind.INBAND,
        FailureKind.EARLY_EOF,
        FailureKind.MALFORMED,
        FailureKind.FIRST_TOKEN_TIMEOUT,
        FailureKind.IDLE_TIMEOUT,
        FailureKind.TOTAL_TIMEOUT,
    }
)


def counts_against_deployment(kind: FailureKind) -> bool:
    """Whether a failure of this kind is evidence that the deployment is unhealthy."""
    return kind in _COUNTED


class CircuitBreaker:
    """See the module docstring. Edge cases, decided:

    - A result that arrives while OPEN came from a request admitted before the breaker opened: it says
      nothing new, so it changes nothing (a late success must not flood a struggling deployment).
      While HALF_OPEN a result is taken as the probe's: with no request ids it cannot be told apart
      from a straggler admitted before the opening, and either says how the deployment is doing now.
    - A probe that never reports (its request was cancelled by a client disconnect) would keep the
      deployment out forever; after another `cooldown_s` the probe is presumed lost and the next
      `allow()` admits a new one.
    - A success while CLOSED clears the count: the threshold means failures in a row, so a deployment
      that fails now and then, which retries absorb, stays in rotation.
    """

    __slots__ = ("_failures", "_opened_at", "_policy", "_probe_at", "_state")

    def __init__(self, policy: BreakerPolicy = BreakerPolicy()) -> None:
        self._policy = policy
        self._state = BreakerState.CLOSED
        self._failures: deque[float] = deque()  # times of recent failures while CLOSED
        self._opened_at = 0.0
        self._probe_at = 0.0  # when the HALF_OPEN probe was admitted

    def allow(self, now: float) -> bool:
        """May a request go to this deployment now? Admitting the half-open probe uses it up."""
        if self._state is BreakerState.CLOSED:
            return True
        cooldown = self._policy.cooldown_s
        if self._state is BreakerState.OPEN and now - self._opened_at < cooldown:
            return False
        if self._state is BreakerState.HALF_OPEN and now - self._probe_at < cooldown:
            return False  # the probe is in flight
        self._state = BreakerState.HALF_OPEN
        self._probe_at = now
        return True

    def record_success(self, now: float) -> None:
        if self._state is BreakerState.OPEN:
            return  # a request admitted before the breaker opened: stale news
        self._state = BreakerState.CLOSED
        self._failures.clear()

    def record_failure(self, now: float) -> None:
        if self._state is BreakerState.OPEN:
            return  # stale, as in record_success; the cooldown runs from the opening
        if self._state is BreakerState.HALF_OPEN:
            self._open(now)  # the probe failed
            return
        horizon = now - self._policy.window_s
        while self._failures and self._failures[0] <= horizon:
            self._failures.popleft()
        self._failures.append(now)
        if len(self._failures) >= self._policy.failure_threshold:
            self._open(now)

    def state(self, now: float) -> BreakerState:
        """The state as seen at `now`, without changing it: OPEN past its cooldown reads HALF_OPEN."""
        if self._state is BreakerState.OPEN and now - self._opened_at >= self._policy.cooldown_s:
            return BreakerState.HALF_OPEN
        return self._state

    def _open(self, now: float) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = now
        self._failures.clear()
