"""RecoveryPacing (gateway/state/redis_pacing.py): a lone Redis outage is probed again at once, a Redis
that keeps dropping right after it answered is probed later and later, up to a ceiling, and shared
counting that holds forgets the flaps."""

from __future__ import annotations

import pytest

from gateway.state.redis_pacing import FIRST_FLAP_WAIT_S, FLAP_WINDOW_S, MAX_FLAP_WAIT_S, RecoveryPacing

FIRST = 0.05


def flapping(pacing: RecoveryPacing, times: int, up_s: float, t: float = 1000.0) -> list[float]:
    """`times` fallbacks, each `up_s` after the recovery before it; the waits the pacing chose."""
    waits = []
    for _ in range(times):
        wait = pacing.fell_back(t, FIRST)
        waits.append(wait)
        t += wait
        pacing.restored(t)
        t += up_s
    return waits


def test_a_lone_outage_and_the_first_ever_are_probed_at_the_first_wait() -> None:
    pacing = RecoveryPacing()
    assert pacing.fell_back(5.0, FIRST) == FIRST  # never restored before: not a flap
    pacing.restored(6.0)
    assert pacing.fell_back(6.0 + FLAP_WINDOW_S, FIRST) == FIRST  # shared counting held the window
    assert pacing.flaps == 0


def test_flaps_double_the_wait_up_to_the_ceiling() -> None:
    waits = flapping(RecoveryPacing(), 10, up_s=0.5)
    expected = [FIRST] + [min(FIRST_FLAP_WAIT_S * 2 ** n, MAX_FLAP_WAIT_S) for n in range(9)]
    assert waits == pytest.approx(expected)
    assert waits[-1] == MAX_FLAP_WAIT_S and FIRST_FLAP_WAIT_S < MAX_FLAP_WAIT_S


def test_shared_counting_that_holds_forgets_the_flaps() -> None:
    pacing = RecoveryPacing()
    flapping(pacing, 5, up_s=1.0)
    assert pacing.flaps == 4
    assert flapping(pacing, 1, up_s=0.0, t=10_000.0) == [FIRST]
    assert pacing.flaps == 0


def test_the_wait_is_never_shorter_than_the_first() -> None:
    """A backend configured to probe slowly is not probed faster because it flapped."""
    pacing = RecoveryPacing()
    pacing.fell_back(0.0, 1.0)
    pacing.restored(1.0)
    assert pacing.fell_back(1.5, 1.0) == 1.0


def test_a_long_run_of_flaps_stays_at_the_ceiling() -> None:
    assert flapping(RecoveryPacing(), 2000, up_s=0.0)[-1] == MAX_FLAP_WAIT_S
