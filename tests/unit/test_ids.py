"""`pipeline.ids.ProcessIds`: a per-process random prefix, then a counter of fixed width in hex."""

import re

import pytest

from gateway.pipeline.ids import ProcessIds


@pytest.mark.parametrize("digits", [12, 16])
def test_ids_are_the_prefix_then_a_counter_of_fixed_width(digits: int) -> None:
    ids = ProcessIds(digits)
    first, second = ids.new(), ids.new()
    pattern = re.compile(rf"^{ids.prefix}[0-9a-f]{{{digits}}}$")
    assert pattern.match(first) and pattern.match(second)
    assert int(second[-digits:], 16) == int(first[-digits:], 16) + 1


def test_a_renewed_process_gets_another_prefix_and_counts_again() -> None:
    ids = ProcessIds(16)
    before = ids.new()
    ids.renew()
    after = ids.new()
    assert after[:16] != before[:16] and after.endswith("0" * 16)
