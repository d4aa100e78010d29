"""Hypothesis settings for the protocol-fidelity property tests: bounded and seeded in `make test`
(derandomized: the same examples every run), larger with HYPOTHESIS_PROFILE=nightly (random seeds, ten
times the examples). See tests/README.md."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"


def fidelity(examples: int) -> settings:
    """`examples` in `make test`; ten times as many, unseeded, in the nightly run."""
    return settings(max_examples=examples * 10 if NIGHTLY else examples, derandomize=not NIGHTLY, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], database=None)
