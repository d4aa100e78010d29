"""`bench.footprint` counts what a callgrind file says was executed: each instruction address once per
64-byte line and object, a call's inclusive cost never as the caller's own; and, with valgrind, it
measures the pieces of `bench.cold_wake` for real (counts only, no timing)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from bench.footprint import Footprint, collected, main, read_callgrind, report

LIBPY = "/lib/libpython3.11.so.1.0"
LIBC = "/lib/libc.so.6"
# Two objects; the same offset (0x1000) in both, which are two different lines of code. The comments give
# each cost line's 64-byte line (address >> 6) and 4 KiB page (address >> 12) in its object.
SYNTHETIC = f"""# callgrind format
version: 1
creator: callgrind-3.19.0
cmd: python -c "f(x=(1))"
positions: instr line
events: Ir
summary: 19

ob={LIBPY}
fl=Python/ceval.c
fn=_PyEval_EvalFrameDefault
0x1000 10 3
0x1004 10 2
0x1040 11 1
0x1080 12 0
cob={LIBC}
cfi=memcpy.S
cfn=memcpy
calls=2 0x1000 5
0x10c0 13 500
0x1000 10 4
fn=_PyEval_EvalFrameDefault'2
0x2000 20 1

ob={LIBC}
fl=memcpy.S
fn=memcpy
0x1000 5 7
fn=(below main)
0x5000 6 1

totals: 19
"""
# libpython: lines 0x40 (0x1000, 0x1004, and 0x1000 again), 0x41 (0x1040), 0x80 (0x2000); 0x42 (0x1080) ran
# no instruction and 0x43 (0x10c0) is the call's inclusive cost: neither counts. Pages 1 and 2.
# libc: lines 0x40 and 0x140, pages 1 and 5.
EXPECTED = Footprint(instructions=3 + 2 + 1 + 4 + 1 + 7 + 1, code_lines=3 + 2, pages=4, functions=3,
                     lines_by_object={LIBPY: 3, LIBC: 2},
                     lines_by_function={(LIBPY, "_PyEval_EvalFrameDefault"): 3, (LIBC, "memcpy"): 1,
                                        (LIBC, "(below main)"): 1})


def test_it_counts_each_executed_line_once_per_object() -> None:
    fp = read_callgrind(SYNTHETIC.splitlines())
    assert fp == EXPECTED
    assert fp.top_functions(2) == [(LIBPY, "_PyEval_EvalFrameDefault", 3), (LIBC, "(below main)", 1)]


def test_a_file_reads_as_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "callgrind.out"
    path.write_text(SYNTHETIC)
    assert read_callgrind(path) == read_callgrind(str(path)) == EXPECTED


@pytest.mark.parametrize(("text", "fix"), [
    ("positions: instr line\nevents: Ir\nfn=f\n0x10 1 1\n+4 1 2\n", "--compress-pos=no"),
    ("positions: instr line\nevents: Ir\nfn=f\n0x10 1 1\n* 1 2\n", "--compress-pos=no"),
    ("positions: instr line\nevents: Ir\nfn=(3) f\n0x10 1 1\n", "--compress-strings=no"),
    ("positions: line\nevents: Ir\nfn=f\n10 1\n", "--dump-instr=yes"),
    ("events: Ir\nfn=f\n0x10 1 1\n", "--dump-instr=yes"),
])
def test_a_file_it_cannot_read_rightly_is_refused(text: str, fix: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fix)):
        read_callgrind(text.splitlines())


def test_nothing_collected_is_an_error_that_names_the_symbol() -> None:
    empty = read_callgrind("positions: instr line\nevents: Ir\nsummary: 0\ntotals: 0\n".splitlines())
    with pytest.raises(SystemExit, match="sys_call_tracing"):
        collected("noop", empty)
    assert collected("noop", EXPECTED) is EXPECTED


def test_the_report_gives_per_run_figures_and_each_piece_detail() -> None:
    text = report({"core": EXPECTED, "noop": EXPECTED}, runs=19, python="/py")
    assert "| core | 1 | 5 (0.3) | 4 | 3 |" in text and "| noop | 1 | 5 (0.3) |" in text
    assert text.count("### ") == 2 and "| libpython3.11.so.1.0 | 3 (0.2) |" in text
    assert "| `_PyEval_EvalFrameDefault` | libpython3.11.so.1.0 | 3 |" in text
    assert "sys_call_tracing" in text.splitlines()[0]


def test_without_valgrind_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no valgrind on it
    with pytest.raises(SystemExit, match="needs valgrind"):
        main(["--pieces", "noop"])


def _totals(path: Path) -> int:
    found = re.search(r"^totals: (\d+)$", path.read_text(), re.M)
    assert found is not None
    return int(found.group(1))


# skipped on a machine without valgrind, never in CI (.ci/run sets CI): there `make tools` installed it
@pytest.mark.skipif(shutil.which("valgrind") is None and not os.environ.get("CI"),
                    reason="needs valgrind (scripts/ensure-tools.sh installs it)")
def test_the_pieces_measured_for_real(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two valgrind runs: the noop piece runs less code than a stream core's first read, and the
    instructions counted are callgrind's own total (no call's inclusive cost counted twice)."""
    main(["--pieces", "noop,core", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    noop, core = (read_callgrind(tmp_path / f"callgrind.{name}.out") for name in ("noop", "core"))
    assert 0 < noop.code_lines < core.code_lines and 0 < noop.instructions < core.instructions
    assert noop.instructions == _totals(tmp_path / "callgrind.noop.out")
    assert core.instructions == _totals(tmp_path / "callgrind.core.out")
    assert f"| noop | {noop.instructions:,} | {noop.code_lines:,} (" in out
    assert f"| core | {core.instructions:,} | {core.code_lines:,} (" in out
    assert any("libpython" in obj for obj in core.lines_by_object)  # symbols: the interpreter's own code
