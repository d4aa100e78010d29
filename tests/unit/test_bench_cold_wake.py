"""`bench.cold_wake` (issue #34, point 4) measures what it says: its pieces run the gateway's request reader
and a chat stream core on S1's own bytes, and each gap is slept before the runs it labels (no timing
assertions: speed is measured only by running the bench)."""

from __future__ import annotations

from bench.cold_wake import PIECES, core_piece, measure, parse_piece, table


def test_the_pieces_run_the_gateway_on_s1_bytes() -> None:
    for seed in (1, 7):
        parse_piece(seed)()  # raises unless the reader returned S1's request with its body
        core_piece(seed)()  # raises unless the first read made the stream committable


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
