"""Session affinity's pure parts (CONTRACT §10): which session a request names, the rendezvous ranking
(stable, spread, minimal movement), the session's home skipped while its breaker is open and back once
its probe succeeds, and the kept / moved / new classification."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

from gateway.config.types import Deployment
from gateway.core.policy.affinity import (
    MAX_SESSION_CHARS,
    AffinityResult,
    SeenSessions,
    affinity_result,
    session_digest,
)
from gateway.core.policy.breaker import BreakerPolicy, CircuitBreaker
from gateway.core.policy.routing import candidate_order, plan_order, rendezvous_order

THREE = tuple(Deployment(provider="up", model=f"dep-{i}") for i in range(3))


def never() -> float:
    raise AssertionError("a session's order draws no random number")


def digest(raw: str) -> str:
    got = session_digest({"x-claude-code-session-id": raw}, {})
    assert got is not None
    return got


def test_the_session_comes_from_the_first_source_that_names_one() -> None:
    body = {"prompt_cache_key": "pck", "metadata": {"user_id": "user_1_session_9"}}
    headers = {"x-claude-code-session-id": "cc", "session-id": "codex", "session_id": "codex2"}
    assert session_digest(headers, body) == digest("cc")
    assert session_digest({"session-id": "codex", "session_id": "codex2"}, body) == digest("codex")
    assert session_digest({"session_id": "codex2"}, body) == digest("codex2")
    assert session_digest({}, body) == digest("pck")
    assert session_digest({}, {"metadata": {"user_id": "user_1_session_9"}}) == digest("user_1_session_9")
    assert session_digest({"x-claude-code-session-id": ""}, {"prompt_cache_key": "pck"}) == digest("pck")


def test_no_usable_session_is_none() -> None:
    for headers, body in [({}, {}), ({}, {"prompt_cache_key": 7}), ({}, {"metadata": "user"}),
                          ({}, {"metadata": {"user_id": ["x"]}}), ({"session-id": "  "}, {}),
                          ({"session-id": "x" * (MAX_SESSION_CHARS + 1)}, {})]:
        assert session_digest(headers, body) is None, (headers, body)


def test_the_digest_is_the_id_hashed_never_the_id() -> None:
    got = digest("0f3c2a5e-session")
    assert len(got) == 32 and "0f3c2a5e" not in got and got == digest("0f3c2a5e-session")
    assert got != digest("0f3c2a5e-session2")


def test_the_ranking_is_the_same_in_another_process() -> None:
    """Replicas agree with no shared state: nothing of the process (hash seeds) enters the ranking."""
    sessions = [digest(f"s{i}") for i in range(20)]
    here = [rendezvous_order(THREE, s) for s in sessions]
    code = ("import sys, json; from gateway.config.types import Deployment; "
            "from gateway.core.policy.routing import rendezvous_order; "
            "d = tuple(Deployment(provider='up', model=f'dep-{i}') for i in range(3)); "
            "print(json.dumps([rendezvous_order(d, s) for s in sys.argv[1:]]))")
    out = subprocess.run([sys.executable, "-c", code, *sessions], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345"})
    assert json.loads(out.stdout) == here


def test_sessions_spread_over_every_deployment() -> None:
    homes = Counter(rendezvous_order(THREE, digest(f"session-{i}"))[0] for i in range(3000))
    assert set(homes) == {0, 1, 2}
    assert all(800 < n < 1200 for n in homes.values()), homes  # 1000 each, binomial sd ~26


def test_a_deployment_leaving_moves_only_the_sessions_it_was_home_to() -> None:
    sessions = [digest(f"session-{i}") for i in range(500)]
    labels = [d.label for d in THREE]
    for s in sessions:
        full = [labels[i] for i in rendezvous_order(THREE, s)]
        without = [labels[1:][i] for i in rendezvous_order(THREE[1:], s)]
        assert without == [label for label in full if label != labels[0]]  # the rest keep their order


def test_affinity_ranks_balanced_and_without_a_session_routing_is_as_before() -> None:
    s = digest("abc")
    assert candidate_order(THREE, "balanced", {d.label: 0 for d in THREE}, never, s) == rendezvous_order(THREE, s)
    assert candidate_order(THREE, "ordered", {}, never) == [0, 1, 2]


def test_under_ordered_a_session_changes_nothing() -> None:
    """Issue #55, finding 5: with `routing: ordered` a client found a session id for each deployment and
    sent 30 of 30 requests to the last-resort one. Only the policy's first choice may be ranked: here one."""
    for i in range(200):
        assert candidate_order(THREE, "ordered", {}, never, digest(f"s-{i}")) == [0, 1, 2]


def test_a_failing_home_is_skipped_and_its_session_returns_when_the_probe_succeeds() -> None:
    s = digest("session-7")
    order = rendezvous_order(THREE, s)
    home = THREE[order[0]].label
    breakers = {d.label: CircuitBreaker(BreakerPolicy(failure_threshold=1, window_s=10, cooldown_s=5)) for d in THREE}
    now = [0.0]

    def allowed(label: str) -> bool:
        return breakers[label].allow(now[0])

    breakers[home].record_failure(now[0])  # home opens
    assert plan_order(THREE, "balanced", {}, allowed, never, s) == order[1:]  # next of its own ranking
    now[0] = 6.0  # the cooldown has passed: the session's next request carries home's probe
    plan = plan_order(THREE, "balanced", {}, allowed, never, s)
    assert plan[0] == order[0]
    breakers[home].record_success(now[0])
    assert plan_order(THREE, "balanced", {}, allowed, never, s) == order


def test_kept_moved_new() -> None:
    assert affinity_result("a", "a", seen_before=False) is AffinityResult.NEW
    assert affinity_result("a", "b", seen_before=False) is AffinityResult.NEW
    assert affinity_result("a", "a", seen_before=True) is AffinityResult.KEPT
    assert affinity_result("a", "b", seen_before=True) is AffinityResult.MOVED


def test_seen_sessions_are_bounded_and_forget_the_least_recent() -> None:
    seen = SeenSessions(capacity=2)
    assert [seen.visit("a"), seen.visit("b"), seen.visit("a")] == [False, False, True]
    assert seen.visit("c") is False  # b, the least recently seen, goes
    assert [seen.visit("a"), seen.visit("b")] == [True, False]
