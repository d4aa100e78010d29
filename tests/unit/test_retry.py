"""The retry decision table (gateway.core.policy.retry): what happens after an attempt fails.

Where the design documents' rules are covered (decision part only; the I/O parts, such as the
watchdogs firing, preamble replacement and learning per provider, belong to integration tests):

Streaming guide, "Reliability" (and its "Idle watchdog" note):
- "Hard deadline + idle watchdog ... a trickling or stalled stream can never run unbounded": a deadline
  or idle timeout before the first token moves on and never waits on the same deployment
  (test_timeouts_move_to_the_next_deployment_never_the_same, rows of test_decision_table); after the
  first token it is terminal (test_nothing_is_retried_after_the_first_token). Our contract (§4.2) picks
  the next deployment rather than the same one for a timeout, as the ADR does.
- "No duplicated partial output. Transient failures are retried with the same backoff ... only until
  the first fragment has been delivered; after that, the failure is terminal":
  test_nothing_is_retried_after_the_first_token, test_transient_failures_retry_with_jittered_backoff,
  test_backoff_bounds, test_backoff_is_capped_at_max_backoff, test_decision_table.
- "Learn-once fallbacks. A provider that rejects the stream_options field is retried once without it;
  a provider that rejects stream outright ... switches to the buffered path":
  test_learn_once_fallbacks_retry_at_once_outside_the_retry_budget,
  test_learn_once_fallbacks_are_bounded, test_learn_once_failures_do_not_decide_the_final_error.
- "Billing errors still fail fast. A 429 reporting an empty balance or exhausted quota is returned
  immediately ... never retried into an opaque timeout": test_quota_never_waits_and_never_repeats.
  The contract (§4.2) lets another deployment (another account) try first, without delay.

ADR 240, "Failures stay on the known path":
- "A connection ... that fails before the stream has opened ... with the retries of sendRequest()":
  test_connect_errors_and_error_statuses_are_retried (CONNECT, 429, 5xx rows).
- "a secret that fails": an upstream 401/403 is our credential, not the client's:
  test_upstream_auth_moves_on_and_is_not_the_clients_error.
- "a provider that answers the request for a stream with an error": 429/5xx rows of
  test_connect_errors_and_error_statuses_are_retried; other 4xx pass through:
  test_client_errors_pass_through_at_once.
- "an overload the provider reports inside the stream before the first text (rate_limit_exceeded,
  server_error ... after HTTP 200)": test_inband_overload_before_the_first_token_is_retried.
- "A timeout is not sent again": test_timeouts_move_to_the_next_deployment_never_the_same.
- "Anything after the stream opened stands, and the pipeline's fallback restarts the round": our
  boundary is the first token (CONTRACT §4.2-4.3): test_nothing_is_retried_after_the_first_token;
  the fallback order is tests/unit/test_routing.py.

Contract §4.2 "a wait longer than max_backoff_ms moves to the next deployment instead":
test_retry_after_sets_the_least_delay, test_retry_after_up_to_max_backoff_is_waited_out,
test_retry_after_longer_than_max_backoff_moves_on_at_once. What the client sees at the end:
test_final_error_kind.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.types import RetryPolicy
from gateway.core.events import Failure, FailureKind
from gateway.core.policy.retry import (
    LEARN_ONCE_HEADROOM,
    Action,
    AttemptState,
    Decision,
    FinalError,
    backoff_s,
    decide,
    final_error,
    final_error_kind,
)

K = FailureKind
POLICY = RetryPolicy(max_attempts=4, per_deployment=2, initial_backoff_ms=200.0, max_backoff_ms=5000.0)
SECRET_MESSAGE = "upstream says: key sk-proj-abcdef0123456789 at http://10.0.0.7:8000"

# The test's own classification of every kind, written from the contract, not imported from the code.
PASS_KINDS = (K.HTTP_4XX,)
LEARN_KINDS = (K.STREAM_OPTIONS_REJECTED, K.STREAM_REJECTED, K.CACHE_KEY_REJECTED)
TIMEOUT_KINDS = (K.FIRST_TOKEN_TIMEOUT, K.IDLE_TIMEOUT, K.TOTAL_TIMEOUT)
MOVE_KINDS = (K.CONTEXT_LENGTH, K.QUOTA, K.UPSTREAM_AUTH, K.EMPTY, K.NOT_FOUND, *TIMEOUT_KINDS)
TRANSIENT_KINDS = (K.CONNECT, K.HTTP_429, K.HTTP_5XX, K.INBAND, K.EARLY_EOF, K.MALFORMED)
GROUPS = {"pass": PASS_KINDS, "learn": LEARN_KINDS, "move": MOVE_KINDS, "transient": TRANSIENT_KINDS}


def const(value: float) -> Callable[[], float]:
    return lambda: value


def state(total: int, on_dep: int, has_next: bool, first_token: bool = False) -> AttemptState:
    return AttemptState(
        attempts_total=total,
        attempts_on_deployment=on_dep,
        has_next_deployment=has_next,
        first_token_sent=first_token,
    )


def outcome(decision: Decision) -> tuple[Action, float]:
    return decision.action, decision.delay_s


def fail(kind: FailureKind, retry_after_s: float | None = None) -> Failure:
    return Failure(kind=kind, message=SECRET_MESSAGE, retry_after_s=retry_after_s)


# (total, on_deployment, has_next) with POLICY: 4 attempts, 2 per deployment.
SITUATIONS = {
    "fresh": (1, 1, True),
    "fresh, last deployment": (1, 1, False),
    "deployment used up": (2, 2, True),
    "deployment used up, last deployment": (2, 2, False),
    "attempts used up": (4, 1, True),
    "attempts used up, last deployment": (4, 2, False),
}
R, N, G, P = Action.RETRY_SAME, Action.NEXT, Action.GIVE_UP, Action.PASS_THROUGH
# Expected (action, delay) per group and situation, before the first token, with rand() == 0.5.
# Transient retries after attempt 1 on a deployment: equal jitter, (0.5 + 0.5 * 0.5) * 200 ms = 0.15 s.
TABLE: dict[str, dict[str, tuple[Action, float]]] = {
    "pass": {s: (P, 0.0) for s in SITUATIONS},
    "learn": {s: (R, 0.0) for s in SITUATIONS},
    "move": {
        "fresh": (N, 0.0),
        "fresh, last deployment": (G, 0.0),
        "deployment used up": (N, 0.0),
        "deployment used up, last deployment": (G, 0.0),
        "attempts used up": (G, 0.0),
        "attempts used up, last deployment": (G, 0.0),
    },
    "transient": {
        "fresh": (R, 0.15),
        "fresh, last deployment": (R, 0.15),
        "deployment used up": (N, 0.0),
        "deployment used up, last deployment": (G, 0.0),
        "attempts used up": (G, 0.0),
        "attempts used up, last deployment": (G, 0.0),
    },
}
ROWS = [
    pytest.param(kind, name, first_token, id=f"{kind.value}-{name}-{'after' if first_token else 'before'}")
    for group in GROUPS.values()
    for kind in group
    for name in SITUATIONS
    for first_token in (False, True)
]


def group_of(kind: FailureKind) -> str:
    return next(name for name, kinds in GROUPS.items() if kind in kinds)


def test_the_table_covers_every_failure_kind_once() -> None:
    listed = [k for kinds in GROUPS.values() for k in kinds]
    assert sorted(listed) == sorted(FailureKind)


@pytest.mark.parametrize(("kind", "situation", "first_token"), ROWS)
def test_decision_table(kind: FailureKind, situation: str, first_token: bool) -> None:
    total, on_dep, has_next = SITUATIONS[situation]
    got = decide(fail(kind), state(total, on_dep, has_next, first_token), POLICY, const(0.5))
    expected = (G, 0.0) if first_token else TABLE[group_of(kind)][situation]
    assert (got.action, got.delay_s) == pytest.approx(expected)
    assert kind.value in got.reason
    assert "sk-proj" not in got.reason and "10.0.0.7" not in got.reason


@pytest.mark.parametrize("kind", list(FailureKind))
def test_nothing_is_retried_after_the_first_token(kind: FailureKind) -> None:
    for retry_after in (None, 0.5, 60.0):
        got = decide(fail(kind, retry_after), state(1, 1, True, first_token=True), POLICY, const(0.5))
        assert outcome(got) == (Action.GIVE_UP, 0.0)


@pytest.mark.parametrize("kind", TRANSIENT_KINDS)
def test_transient_failures_retry_with_jittered_backoff(kind: FailureKind) -> None:
    policy = RetryPolicy(max_attempts=10, per_deployment=4, initial_backoff_ms=100.0, max_backoff_ms=1000.0)
    delays = [decide(fail(kind), state(n, n, True), policy, const(0.5)) for n in (1, 2, 3)]
    assert [d.action for d in delays] == [Action.RETRY_SAME] * 3
    assert [d.delay_s for d in delays] == pytest.approx([0.075, 0.15, 0.3])
    assert decide(fail(kind), state(4, 4, True), policy, const(0.5)).action is Action.NEXT


@pytest.mark.parametrize("kind", [K.CONNECT, K.HTTP_429, K.HTTP_5XX])
def test_connect_errors_and_error_statuses_are_retried(kind: FailureKind) -> None:
    got = decide(fail(kind), state(1, 1, False), POLICY, const(0.999))
    assert got.action is Action.RETRY_SAME
    assert 0.0 < got.delay_s < 0.2


def test_inband_overload_before_the_first_token_is_retried() -> None:
    assert outcome(decide(fail(K.INBAND), state(1, 1, True), POLICY, const(0.0))) == (Action.RETRY_SAME, 0.1)
    assert decide(fail(K.INBAND), state(1, 1, True, True), POLICY, const(0.0)).action is Action.GIVE_UP


@pytest.mark.parametrize("kind", TIMEOUT_KINDS)
def test_timeouts_move_to_the_next_deployment_never_the_same(kind: FailureKind) -> None:
    generous = RetryPolicy(max_attempts=10, per_deployment=5)
    assert outcome(decide(fail(kind), state(1, 1, True), generous, const(0.5))) == (Action.NEXT, 0.0)
    assert decide(fail(kind), state(1, 1, False), generous, const(0.5)).action is Action.GIVE_UP


def test_quota_never_waits_and_never_repeats() -> None:
    # Even when the provider asks for a short wait, another account is tried at once.
    quota = fail(K.QUOTA, retry_after_s=1.0)
    assert outcome(decide(quota, state(1, 1, True), POLICY, const(0.9))) == (Action.NEXT, 0.0)
    assert decide(quota, state(1, 1, False), POLICY, const(0.9)).action is Action.GIVE_UP


def test_upstream_auth_moves_on_and_is_not_the_clients_error() -> None:
    auth = Failure(kind=K.UPSTREAM_AUTH, message="deployment rejected credentials", status=401)
    assert decide(auth, state(1, 1, True), POLICY, const(0.5)).action is Action.NEXT
    assert decide(auth, state(1, 1, False), POLICY, const(0.5)).action is Action.GIVE_UP
    assert final_error_kind([auth]) == "upstream"


def test_client_errors_pass_through_at_once() -> None:
    refused = Failure(kind=K.HTTP_4XX, message="refused", status=400, code="content_policy_violation")
    for where in (state(1, 1, True), state(4, 2, False)):
        assert outcome(decide(refused, where, POLICY, const(0.5))) == (Action.PASS_THROUGH, 0.0)
    assert final_error_kind([refused]) == "client"


@pytest.mark.parametrize("kind", LEARN_KINDS)
def test_learn_once_fallbacks_retry_at_once_outside_the_retry_budget(kind: FailureKind) -> None:
    # "No retries" configured: the negotiation still happens, per_deployment is not consulted.
    strict = RetryPolicy(max_attempts=1, per_deployment=1)
    assert outcome(decide(fail(kind), state(1, 1, False), strict, const(0.9))) == (Action.RETRY_SAME, 0.0)
    # Both fallbacks in a row on a one-attempt policy.
    assert decide(fail(K.STREAM_REJECTED), state(2, 2, False), strict, const(0.9)).action is Action.RETRY_SAME


@pytest.mark.parametrize("kind", LEARN_KINDS)
def test_learn_once_fallbacks_are_bounded(kind: FailureKind) -> None:
    # A provider that keeps rejecting after the request was changed cannot loop the request.
    limit = POLICY.max_attempts + LEARN_ONCE_HEADROOM
    last_free = decide(fail(kind), state(limit - 1, limit - 1, True), POLICY, const(0.5))
    assert last_free.action is Action.RETRY_SAME
    assert decide(fail(kind), state(limit, limit, True), POLICY, const(0.5)).action is Action.GIVE_UP


def test_retry_after_sets_the_least_delay() -> None:
    with_wait = fail(K.HTTP_429, retry_after_s=2.0)
    assert decide(with_wait, state(1, 1, True), POLICY, const(0.0)).delay_s == 2.0
    # Jitter above the requested wait is kept: the wait is a floor, not a replacement.
    big = RetryPolicy(initial_backoff_ms=4000.0, max_backoff_ms=5000.0)
    assert decide(fail(K.HTTP_429, 1.0), state(1, 1, True), big, const(0.5)).delay_s == pytest.approx(3.0)


def test_retry_after_up_to_max_backoff_is_waited_out() -> None:
    # The only deployment says Retry-After: 2 with max_backoff 5 s: wait 2 s and try it again.
    got = decide(fail(K.HTTP_429, 2.0), state(1, 1, False), POLICY, const(0.0))
    assert (got.action, got.delay_s) == (Action.RETRY_SAME, 2.0)
    at_cap = decide(fail(K.HTTP_5XX, 5.0), state(1, 1, True), POLICY, const(0.0))
    assert (at_cap.action, at_cap.delay_s) == (Action.RETRY_SAME, 5.0)


def test_retry_after_longer_than_max_backoff_moves_on_at_once() -> None:
    long_wait = fail(K.HTTP_429, 5.001)
    assert outcome(decide(long_wait, state(1, 1, True), POLICY, const(0.5))) == (Action.NEXT, 0.0)
    assert decide(long_wait, state(1, 1, False), POLICY, const(0.5)).action is Action.GIVE_UP
    assert decide(fail(K.HTTP_429, math.inf), state(1, 1, True), POLICY, const(0.5)).action is Action.NEXT


def test_nonsense_retry_after_is_harmless() -> None:
    nan = decide(fail(K.HTTP_429, math.nan), state(1, 1, True), POLICY, const(0.5))
    assert (nan.action, nan.delay_s) == pytest.approx((Action.RETRY_SAME, 0.15))
    negative = decide(fail(K.HTTP_429, -3.0), state(1, 1, True), POLICY, const(0.5))
    assert (negative.action, negative.delay_s) == pytest.approx((Action.RETRY_SAME, 0.15))


@pytest.mark.parametrize("r", [0.0, 0.5, 0.999])
def test_backoff_bounds(r: float) -> None:
    policy = RetryPolicy(initial_backoff_ms=200.0, max_backoff_ms=5000.0)
    caps = [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    got = [backoff_s(n, policy, const(r)) for n in range(1, 9)]
    assert got == pytest.approx([(0.5 + 0.5 * r) * cap for cap in caps])
    assert all(cap / 2 <= d < cap for d, cap in zip(got, caps, strict=True)), "a floor of half the cap"


def test_backoff_is_capped_at_max_backoff() -> None:
    policy = RetryPolicy(initial_backoff_ms=200.0, max_backoff_ms=5000.0)
    assert backoff_s(10_000, policy, const(0.999)) == pytest.approx(4.9975)
    assert backoff_s(0, policy, const(0.5)) == pytest.approx(0.15)  # attempt numbers start at 1
    inverted = RetryPolicy(initial_backoff_ms=8000.0, max_backoff_ms=1000.0)
    assert backoff_s(1, inverted, const(0.5)) == pytest.approx(0.75)


def test_backoff_survives_a_broken_random_source() -> None:
    assert backoff_s(1, POLICY, const(math.nan)) == pytest.approx(0.1)  # the floor
    assert backoff_s(1, POLICY, const(-1.0)) == pytest.approx(0.1)
    assert backoff_s(1, POLICY, const(7.0)) == pytest.approx(0.2)


def test_backoff_uses_the_injected_source_once_per_delay() -> None:
    draws = itertools.cycle([0.25, 0.75])
    source = lambda: next(draws)  # noqa: E731
    assert [backoff_s(1, POLICY, source) for _ in range(3)] == pytest.approx([0.125, 0.175, 0.125])


def f(kind: FailureKind) -> Failure:
    return Failure(kind=kind, message="m")


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ([K.FIRST_TOKEN_TIMEOUT], "timeout"),
        ([K.FIRST_TOKEN_TIMEOUT, K.IDLE_TIMEOUT, K.TOTAL_TIMEOUT], "timeout"),
        ([K.FIRST_TOKEN_TIMEOUT, K.HTTP_5XX], "upstream"),
        ([K.HTTP_5XX, K.FIRST_TOKEN_TIMEOUT], "upstream"),
        ([K.CONNECT, K.CONNECT, K.HTTP_429, K.QUOTA], "quota"),
        ([K.QUOTA, K.HTTP_5XX], "upstream"),
        ([K.HTTP_4XX], "client"),
        ([K.HTTP_5XX, K.HTTP_4XX], "client"),
        ([K.CONTEXT_LENGTH, K.CONTEXT_LENGTH], "client"),
        ([K.CONTEXT_LENGTH, K.HTTP_5XX], "upstream"),
        ([K.HTTP_5XX, K.CONTEXT_LENGTH], "upstream"),
        ([K.UPSTREAM_AUTH], "upstream"),
        ([], "upstream"),
    ],
)
def test_final_error_kind(kinds: list[FailureKind], expected: str) -> None:
    assert final_error_kind([f(k) for k in kinds]) == expected


def limited(kind: FailureKind = K.INBAND, wait: float | None = None, **fields: Any) -> Failure:
    return Failure(kind=kind, message="m", retry_after_s=wait, **fields)


@pytest.mark.parametrize(("failures", "expected"), [
    # every attempt rate-limited, by status or in-band (code, type or status): 429 with the last wait given
    ([limited(K.HTTP_429, 3.0), limited(code="rate_limit_exceeded", wait=1.5)], FinalError("rate_limited", 1.5)),
    ([limited(type="rate_limit_error", status=429, wait=9.0), limited(K.HTTP_429)], FinalError("rate_limited", 9.0)),
    ([limited(status=429)], FinalError("rate_limited", None)),
    ([limited(K.STREAM_OPTIONS_REJECTED), limited(K.HTTP_429, 2.0)], FinalError("rate_limited", 2.0)),
    # anything else among them is not "every attempt": 502, the last failure's own wait kept
    ([limited(K.HTTP_429, 3.0), limited(K.HTTP_5XX)], FinalError("upstream", None)),
    ([limited(code="server_error", wait=4.0)], FinalError("upstream", 4.0)),
    ([limited(K.HTTP_429), limited(K.FIRST_TOKEN_TIMEOUT)], FinalError("upstream", None)),
    ([limited(K.FIRST_TOKEN_TIMEOUT), limited(K.IDLE_TIMEOUT)], FinalError("timeout", None)),
    ([limited(K.HTTP_429, 3.0), limited(K.QUOTA, 8.0)], FinalError("quota", 8.0)),
    ([limited(K.HTTP_429, math.nan)], FinalError("rate_limited", None)),  # NaN is no wait
])
def test_final_error_names_the_class_and_the_wait(failures: list[Failure], expected: FinalError) -> None:
    assert final_error(failures) == expected


def test_learn_once_failures_do_not_decide_the_final_error() -> None:
    assert final_error_kind([f(K.STREAM_OPTIONS_REJECTED), f(K.FIRST_TOKEN_TIMEOUT)]) == "timeout"
    assert final_error_kind([f(K.STREAM_REJECTED), f(K.CONTEXT_LENGTH)]) == "client"
    assert final_error_kind([f(K.STREAM_REJECTED), f(K.STREAM_REJECTED)]) == "upstream"


policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 10),
    per_deployment=st.integers(1, 5),
    initial_backoff_ms=st.floats(0.0, 10_000.0),
    max_backoff_ms=st.floats(0.0, 60_000.0),
)


@given(
    kind=st.sampled_from(list(FailureKind)),
    total=st.integers(1, 20),
    on_dep=st.integers(1, 20),
    has_next=st.booleans(),
    first_token=st.booleans(),
    policy=policies,
    retry_after=st.none() | st.floats(0.0, 120.0),
    r=st.floats(0.0, 1.0, exclude_max=True),
)
def test_decisions_keep_their_promises(
    kind: FailureKind,
    total: int,
    on_dep: int,
    has_next: bool,
    first_token: bool,
    policy: RetryPolicy,
    retry_after: float | None,
    r: float,
) -> None:
    s = state(total, min(on_dep, total), has_next, first_token)
    got = decide(fail(kind, retry_after), s, policy, const(r))
    if first_token:
        assert got.action is Action.GIVE_UP
    if got.action is not Action.RETRY_SAME:
        assert got.delay_s == 0.0
    if got.action is Action.NEXT:
        assert has_next
    if got.action is Action.RETRY_SAME and kind not in LEARN_KINDS:
        assert kind in TRANSIENT_KINDS
        assert s.attempts_total < policy.max_attempts
        assert s.attempts_on_deployment < policy.per_deployment
        assert 0.0 <= got.delay_s <= policy.max_backoff_ms / 1000.0
        assert got.delay_s >= (retry_after or 0.0)
    if got.action is Action.PASS_THROUGH:
        assert kind is K.HTTP_4XX
