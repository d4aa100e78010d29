"""Which output guardrails judge a stream how (docs/reference.md, "`guardrails`"): windowed (`stream` terms
and regex), holding the answer for the verdict (`hold`, and a webhook in `stream` mode: it judges only whole
texts), or after the answer went out (`audit`)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import parse_config
from gateway.pipeline.safety import ModelSafety, compile_safety


def safety(guard: dict[str, Any]) -> ModelSafety:
    config = parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"p": {"type": "mock"}},
        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}], "guardrails": ["g"]}],
        "guardrails": [{"name": "g", **guard}],
    }, env={})
    return compile_safety(config).models["m"]


TERMS = {"type": "terms", "terms": ["project nightingale"]}
HOOK = {"type": "webhook", "url": "http://127.0.0.1:9/check"}


@pytest.mark.parametrize(("guard", "judged"), [
    (TERMS, "stream"), (TERMS | {"mode": "hold"}, "hold"), (TERMS | {"mode": "audit"}, "audit"),
    (HOOK, "hold"), (HOOK | {"mode": "stream"}, "hold"), (HOOK | {"mode": "hold"}, "hold"),
    (HOOK | {"mode": "audit"}, "audit"),
])
def test_each_output_guardrail_judges_a_stream_as_its_mode_says(guard: dict[str, Any], judged: str) -> None:
    s = safety(guard)
    found = {name for name, guards in (("stream", s.stream_guards), ("hold", s.hold_guards),
                                       ("audit", s.audit_guards)) if guards}
    assert found == {judged}
    assert s.input_guards == ()


def test_the_policy_fingerprint_follows_every_guardrail_field_and_only_them() -> None:
    """The response cache's key carries it (pipeline/cache.py): a reload that keeps the policy keeps the
    cached answers; one that changes any field of a guardrail misses them."""
    same = safety(TERMS | {"mode": "hold"}).fingerprint
    assert same and safety(TERMS | {"mode": "hold"}).fingerprint == same
    for changed in (TERMS, TERMS | {"mode": "hold", "terms": ["project nightingale", "x"]},
                    TERMS | {"mode": "hold", "stage": "both"}, HOOK | {"mode": "hold"}):
        assert safety(changed).fingerprint != same, changed
