"""`bench.cold_wake` (issue #34, point 4) measures what it says: its pieces run the gateway's request reader
and a chat stream core on S1's own bytes, and each gap is slept before the runs it labels (no timing
assertions: speed is measured only by running the bench)."""

from __future__ import annotations

import time

import pytest

from bench.cold_wake import PIECES, WAITS, _spin, core_piece, main, measure, noop_piece, parse_piece, table


def test_the_pieces_run_the_gateway_on_s1_bytes() -> None:
    for seed in (1, 7):
        parse_piece(seed)()  # raises unless the reader returned S1's request with its body
        core_piece(seed)()  # raises unless the first read made the stream committable
        noop_piece(seed)()


def test_each_gap_is_slept_before_the_runs_it_labels() -> None:
    slept: list[float] = []
    rows = measure([0, 5, 50], samples=3, sleep=slept.append)
    assert [(r.gap_ms, r.piece) for r in rows] == [(g, p) for g in (0, 5, 50) for p in PIECES]
    assert all(r.first_us > 0 and r.again_us > 0 and r.after_spin_us > 0 for r in rows)
    # two sleeps per sample and piece (before the first run, before the spin), none for the hot gap
    assert sorted(slept) == sorted([0.005] * 2 * 3 * len(PIECES) + [0.05] * 2 * 3 * len(PIECES))


def test_the_table_has_a_row_per_gap_and_piece() -> None:
    rows = measure([0, 1], samples=1, sleep=lambda s: None)
    text = table(rows)
    assert text.count("\n") == 1 + len(rows)
    assert "| none (hot) | parse |" in text and "| 1 ms | core |" in text


def test_a_spun_gap_is_a_busy_loop_not_a_sleep() -> None:
    """`--wait spin` passes each gap in `_spin`, a loop on the clock: the process keeps its core."""
    assert WAITS["sleep"] is time.sleep and WAITS["spin"] is _spin and len(WAITS) == 2
    t0 = time.perf_counter()
    _spin(0.002)
    assert time.perf_counter() - t0 >= 0.002  # it returns only once the gap has passed


def test_main_spins_the_gaps_it_is_asked_to(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--gaps", "0,1", "--samples", "1", "--wait", "spin"])
    out = capsys.readouterr().out
    assert out.startswith("gaps spun, not slept")
    assert "| 1 ms | noop |" in out
