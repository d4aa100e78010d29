"""The retry decision table: what to do after an attempt failed (docs/extensions.md, "Failure semantics").

Pure: the caller passes the failure, where the request stands, the model's policy and a random source;
it sleeps, moves on or answers. Nothing here reads a clock or does I/O.

The table, in the order the rules apply:

1. The client already has an output token: GIVE_UP, whatever the failure. A retry would duplicate text.
2. `HTTP_4XX` (content policy, invalid request, other client errors): PASS_THROUGH. Another attempt would
   get the same answer, and the client needs the provider's reason.
3. Learn-once fallbacks (`STREAM_OPTIONS_REJECTED`, `STREAM_REJECTED`): RETRY_SAME at once; the caller
   changes the request (drops `stream_options`, or goes buffered) and remembers that for the provider.
   They are protocol negotiation, not a sick deployment, so they ignore `per_deployment` and get
   `LEARN_ONCE_HEADROOM` attempts on top of `max_attempts`. The caller counts every attempt, these
   included: that is what bounds a provider that keeps rejecting after the request was changed.
4. `attempts_total >= max_attempts`: GIVE_UP.
5. Never again on the same deployment (`CONTEXT_LENGTH`, `QUOTA`, `UPSTREAM_AUTH`, `EMPTY`,
   `NOT_FOUND`: a URL or model of our config the upstream does not have, every timeout): NEXT, or
   GIVE_UP when no deployment is left. A timeout is not resent where it happened;
   quota and credentials will not change in a second; another deployment may have a larger context, or
   answer where this one said nothing (the loop keeps the last empty answer for the client).
6. Transient (`CONNECT`, `HTTP_429`, `HTTP_5XX`, `INBAND`, `EARLY_EOF`, `MALFORMED`): RETRY_SAME after
   `backoff_s` while `attempts_on_deployment < per_deployment`, then NEXT, then GIVE_UP. A Retry-After
   sets the least delay; one longer than `max_backoff_ms` moves to the NEXT deployment at once instead
   of waiting (GIVE_UP when there is none): the operator capped the wait with `max_backoff_ms`.

Moving to another deployment never waits: a different deployment is not rate limited by the first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import Literal

from gateway.core.events import Failure, FailureKind


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A model's `retry` block (the config builds it; this table reads it)."""

    max_attempts: int = 4
    per_deployment: int = 2
    initial_backoff_ms: float = 200.0
    max_backoff_ms: float = 5000.0


LEARN_ONCE_HEADROOM = 2
"""Extra attempts a request may spend on learn-once fallbacks: one per fact (stream_options, stream)."""

_MAX_DOUBLINGS = 64  # 2**64 * any sane initial backoff is far past any cap; avoids float overflow


class Action(StrEnum):
    RETRY_SAME = "retry_same"  # sleep `delay_s`, then the same deployment again
    NEXT = "next"  # the next deployment in the plan, at once
    GIVE_UP = "give_up"  # report `final_error` of the failures so far
    PASS_THROUGH = "pass_through"  # answer with the upstream's own client error


@dataclass(frozen=True, slots=True)
class AttemptState:
    """Where the request stands after a failed attempt. Count every attempt, learn-once ones included."""

    attempts_total: int  # attempts made so far for this request, including the one that just failed
    attempts_on_deployment: int  # attempts made on the current deployment, including the one that failed
    has_next_deployment: bool  # another deployment may follow this one in the plan
    first_token_sent: bool  # the client has already received an output token


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    delay_s: float  # > 0 only for RETRY_SAME
    reason: str  # short and client-safe (kinds and counts, never upstream text): for logs


class _Rule(Enum):
    PASS = "pass"
    LEARN = "learn"
    MOVE = "move"
    TRANSIENT = "transient"


_RULE_OF: Mapping[FailureKind, _Rule] = MappingProxyType(
    {
        FailureKind.HTTP_4XX: _Rule.PASS,
        FailureKind.STREAM_OPTIONS_REJECTED: _Rule.LEARN,
        FailureKind.STREAM_REJECTED: _Rule.LEARN,
        FailureKind.CACHE_KEY_REJECTED: _Rule.LEARN,
        FailureKind.CONTEXT_LENGTH: _Rule.MOVE,
        FailureKind.QUOTA: _Rule.MOVE,
        FailureKind.UPSTREAM_AUTH: _Rule.MOVE,
        FailureKind.EMPTY: _Rule.MOVE,
        FailureKind.NOT_FOUND: _Rule.MOVE,
        FailureKind.FIRST_TOKEN_TIMEOUT: _Rule.MOVE,
        FailureKind.IDLE_TIMEOUT: _Rule.MOVE,
        FailureKind.TOTAL_TIMEOUT: _Rule.MOVE,
        FailureKind.CONNECT: _Rule.TRANSIENT,
        FailureKind.HTTP_429: _Rule.TRANSIENT,
        FailureKind.HTTP_5XX: _Rule.TRANSIENT,
        FailureKind.INBAND: _Rule.TRANSIENT,
        FailureKind.EARLY_EOF: _Rule.TRANSIENT,
        FailureKind.MALFORMED: _Rule.TRANSIENT,
    }
)

LEARN_ONCE_KINDS: frozenset[FailureKind] = frozenset(k for k, r in _RULE_OF.items() if r is _Rule.LEARN)


def decide(
    failure: Failure, state: AttemptState, policy: RetryPolicy, rand: Callable[[], float]
) -> Decision:
    """Apply the table in the module docstring. `rand()` returns a float in [0, 1)."""
    kind = failure.kind.value
    if state.first_token_sent:
        return Decision(Action.GIVE_UP, 0.0, f"{kind} after the first token: not retried")
    # A kind added to FailureKind but not to the table is not hammered on the same deployment.
    rule = _RULE_OF.get(failure.kind, _Rule.MOVE)
    if rule is _Rule.PASS:
        return Decision(Action.PASS_THROUGH, 0.0, f"{kind}: upstream client error passed through")
    if rule is _Rule.LEARN:
        return _learn_once(kind, state, policy)
    if state.attempts_total >= policy.max_attempts:
        return _give_up(kind, f"attempts used ({state.attempts_total} of {policy.max_attempts})")
    if rule is _Rule.MOVE:
        return _move_on(kind, state, "not retried on the same deployment")
    return _transient(failure, state, policy, rand)


def _learn_once(kind: str, state: AttemptState, policy: RetryPolicy) -> Decision:
    limit = policy.max_attempts + LEARN_ONCE_HEADROOM
    if state.attempts_total >= limit:
        return _give_up(kind, f"attempts used with fallbacks ({state.attempts_total} of {limit})")
    return Decision(Action.RETRY_SAME, 0.0, f"{kind}: retry with the fallback request")


def _transient(
    failure: Failure, state: AttemptState, policy: RetryPolicy, rand: Callable[[], float]
) -> Decision:
    kind = failure.kind.value
    used, allowed = state.attempts_on_deployment, policy.per_deployment
    if used >= allowed:
        return _move_on(kind, state, f"deployment attempts used ({used} of {allowed})")
    wait = _retry_after_s(failure)
    if wait is not None and wait > policy.max_backoff_ms / 1000.0:
        return _move_on(kind, state, "Retry-After longer than max backoff")
    delay = backoff_s(used, policy, rand)
    if wait is not None:
        delay = max(delay, wait)
    return Decision(Action.RETRY_SAME, delay, f"{kind}: retry same deployment ({used + 1} of {allowed})")


def _move_on(kind: str, state: AttemptState, why: str) -> Decision:
    if state.has_next_deployment:
        return Decision(Action.NEXT, 0.0, f"{kind}: {why}; next deployment")
    return _give_up(kind, f"{why}; no deployment left")


def _give_up(kind: str, why: str) -> Decision:
    return Decision(Action.GIVE_UP, 0.0, f"{kind}: {why}")


def _retry_after_s(failure: Failure) -> float | None:
    """The upstream's requested wait, made safe: NaN is no request, a negative wait is none."""
    wait = failure.retry_after_s
    if wait is None or math.isnan(wait):
        return None
    return max(wait, 0.0)


def backoff_s(attempt_on_deployment: int, policy: RetryPolicy, rand: Callable[[], float]) -> float:
    """Exponential backoff with equal jitter after the given (1-based) attempt on a deployment.

    The cap doubles from `initial_backoff_ms` with each attempt, up to `max_backoff_ms`; the delay is
    uniform in [cap/2, cap). Why equal rather than full jitter: full jitter spreads clients that failed
    together, but its floor is zero, so a retry can come back within milliseconds (36 ms apart was
    measured) and hit an overloaded upstream again before it had any time to recover. Half the cap as a
    floor keeps every retry at least `initial_backoff_ms / 2` away while the other half still spreads
    a burst over a window as wide as the floor. (Decorrelated jitter would also do; it needs the
    previous delay as state, which the table does not keep.)
    """
    doublings = min(max(attempt_on_deployment, 1) - 1, _MAX_DOUBLINGS)
    cap_ms = max(min(policy.max_backoff_ms, policy.initial_backoff_ms * 2.0**doublings), 0.0)
    r = rand()
    r = 0.0 if not r >= 0.0 else min(r, 1.0)  # `not >=` also catches NaN from a broken source
    return (0.5 + 0.5 * r) * cap_ms / 1000.0


FinalKind = Literal["timeout", "upstream", "client", "quota", "rate_limited"]
RATE_LIMIT_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error"})
"""Error codes and types that say "rate limited" inside a 200 stream: OpenAI's and Anthropic's names."""


@dataclass(frozen=True, slots=True)
class FinalError:
    """What the gateway answers once it gives up: the class (see `final_error`) and the wait, in
    seconds, to pass on as `Retry-After` (None: none to pass on)."""

    kind: FinalKind
    retry_after_s: float | None


def is_rate_limit(f: Failure) -> bool:
    """An attempt the upstream refused for its rate limit: HTTP 429, or an in-band error whose status,
    code or type says so (structured fields only, never the message)."""
    if f.kind is FailureKind.HTTP_429:
        return True
    return f.kind is FailureKind.INBAND and (
        f.status == 429 or f.code in RATE_LIMIT_CODES or f.type in RATE_LIMIT_CODES)


def final_error(failures: Sequence[Failure]) -> FinalError:
    """What the gateway reports when it gives up, from every failed attempt in order (docs/reference.md, "Routes").

    - "client": the last failure is a pass-through 4xx, or every deployment tried said the context is
      too long. The caller answers with that failure's own status (400 when it has none), type, code
      and message: clients handle `context_length_exceeded` by shortening the prompt, which a 502 would
      hide (and SDKs would retry a 502 in vain).
    - "quota" (429 with the provider's code): the last attempt's account is out of quota or credit.
      It fails fast with the provider's reason, and the 429 tells the client it is not a gateway fault.
    - "rate_limited" (429 `rate_limit_exceeded`): every attempt was rate-limited by its upstream, by
      status or in-band; the wait is the last one an upstream gave (the freshest word on when it
      has room again), so the application backs off instead of treating it as an outage.
    - "timeout" (504 `upstream_timeout`): every attempt timed out.
    - "upstream" (502 `upstream_error`): anything else, also no attempt at all (every breaker open).
    Learn-once fallbacks are negotiation, not outcomes, so they are left out of "every". Except for
    "rate_limited", the wait is the last failure's own (a 502 after a 503 with Retry-After keeps it).
    """
    real = [f for f in failures if f.kind not in LEARN_ONCE_KINDS]
    last_wait = _retry_after_s(failures[-1]) if failures else None
    if not real:
        return FinalError("upstream", last_wait)
    if real[-1].kind is FailureKind.HTTP_4XX or all(f.kind is FailureKind.CONTEXT_LENGTH for f in real):
        return FinalError("client", last_wait)
    if real[-1].kind is FailureKind.QUOTA:
        return FinalError("quota", last_wait)
    if all(is_rate_limit(f) for f in real):
        given = [w for w in map(_retry_after_s, real) if w is not None]
        return FinalError("rate_limited", given[-1] if given else None)
    if all(f.is_timeout for f in real):
        return FinalError("timeout", None)
    return FinalError("upstream", last_wait)


def final_error_kind(failures: Sequence[Failure]) -> FinalKind:
    """The class alone of `final_error`."""
    return final_error(failures).kind
