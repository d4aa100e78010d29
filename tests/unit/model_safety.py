"""The safety of one model as the stream-core tests run it: redaction with `secrets`, and optionally
the stream guardrail `g` (the term "project nightingale")."""

from __future__ import annotations

import functools

from gateway.config import parse_config
from gateway.pipeline.safety import ModelSafety, compile_safety


@functools.cache
def safety(guard: bool) -> ModelSafety:
    config = parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"p": {"type": "mock"}},
        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}], "redaction": "r",
                    "guardrails": ["g"] if guard else []}],
        "guardrails": [{"name": "g", "type": "terms", "terms": ["project nightingale"]}],
        "redaction": {"profiles": {"r": {"rules": ["secrets"]}}},
    }, env={})
    return compile_safety(config).models["m"]
