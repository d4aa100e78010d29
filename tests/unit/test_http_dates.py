"""The Date header's values, formatted ahead by the server's sweep (`gateway/http/dates.py`)."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from gateway.http.dates import AHEAD, HttpDates

NOW = 1_796_000_000


@pytest.mark.parametrize(("second", "text"), [(0, "Thu, 01 Jan 1970 00:00:00 GMT"),
                                               (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT")])
def test_a_value_is_an_imf_fixdate(second: int, text: str) -> None:
    # RFC 9110 §5.6.7: the example there is 784111777
    dates = HttpDates()
    assert dates.at(second) == text
    dates.prepare(second)
    assert dates.at(second) == text


def test_the_sweep_formats_the_current_second_and_the_next_ones() -> None:
    dates = HttpDates()
    dates.prepare(NOW)
    assert AHEAD >= 1 and NOW + 1 in dates  # the first response of the next second finds its value
    for second in range(NOW, NOW + AHEAD + 1):
        assert second in dates
        assert dates.at(second) == formatdate(second, usegmt=True)
    assert NOW + AHEAD + 1 not in dates and NOW - 1 not in dates


def test_a_prepared_second_is_looked_up_not_formatted_again() -> None:
    dates = HttpDates()
    dates.prepare(NOW)
    first = dates.at(NOW + 1)
    dates.prepare(NOW + 1)  # the next sweep keeps what is formatted
    assert dates.at(NOW + 1) is first
    assert all(second in dates for second in range(NOW + 1, NOW + AHEAD + 2))


def test_the_past_is_dropped_and_a_second_missed_holds_only_itself() -> None:
    dates = HttpDates()
    dates.prepare(NOW)
    dates.prepare(NOW + 1)
    assert NOW not in dates
    late = NOW + 100  # a clock step, or no sweep (a server that is not listening)
    assert dates.at(late) == formatdate(late, usegmt=True)
    assert late in dates and NOW + 1 not in dates and NOW + 2 not in dates
