"""`bench.ws_turns`: the ratio of two transports' CPU, with its bootstrap interval over pairs of
conversations run side by side."""

from __future__ import annotations

import random

from bench.ws_turns import ratio_interval


def test_the_interval_of_a_constant_ratio_is_that_ratio() -> None:
    den = [1.0, 2.0, 3.0, 4.0]
    assert ratio_interval([2 * d for d in den], den) == (2.0, 2.0)


def test_the_interval_holds_the_ratio_of_sums_and_narrows_with_more_pairs() -> None:
    rng = random.Random(1)
    den = [1.0 + rng.random() for _ in range(400)]
    num = [d * (1.05 + rng.gauss(0, 0.05)) for d in den]
    low, high = ratio_interval(num, den)
    assert low < sum(num) / sum(den) < high and high - low < 0.02
    few_low, few_high = ratio_interval(num[:20], den[:20])
    assert few_high - few_low > high - low
