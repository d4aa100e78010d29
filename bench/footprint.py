"""How much machine code the first-token path runs: a deterministic figure for a cold hop's cost (#34, point 4).

After ~50 ms idle on the bench machine a hop's code runs ~10x slower than hot, and the extra cost tracks
the distinct machine code it executes: its instruction fetches miss and are served one after another,
~110-160 ns per 64-byte line of code there (`bench.cold_wake` measures the times). Times on a shared VM
are noisy; instruction and code-line counts under valgrind are not, so a change to the first-token path
can be judged by them. For each piece of `bench.cold_wake` (parse, core, noop) this runs the piece under
callgrind, collecting only inside `sys.call_tracing` (after 3 warm-up runs: imports, the specialising
interpreter), and reports the instructions of one run and the distinct 64-byte lines of code executed
("code lines"), 4 KiB pages and functions, per shared object, with the top functions by code lines.
One run per measurement by default, as a cold hop runs its piece once; the hash seed is fixed (str
hashes steer dict probes), so the same code and environment give the same counts; what moves the heap's
layout (the environment's size, any code loaded before) moves them ~0.2%, and code lines by a few, mostly
in malloc: read smaller changes as none. The `noop` piece is the floor: the call into a piece, no gateway code.

The interpreter must have symbols for `sys_call_tracing` (pyenv and python.org builds do): on a stripped
build callgrind collects nothing, and this says so and exits non-zero. Needs valgrind.

    python -m bench.footprint [--pieces parse,core,noop] [--runs 1] [--python PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.cold_wake import PIECES

LINE_BITS = 6  # 64-byte lines: the unit the instruction cache fetches
PAGE_BITS = 12
WARMUP_RUNS = 3
TOP_OBJECTS = 6
TOP_FUNCTIONS = 10
ROOT = Path(__file__).resolve().parents[1]  # the checkout whose `bench` and `gateway` are measured
SYMBOLS_NOTE = ("the interpreter must have symbols for `sys_call_tracing` (pyenv and python.org builds do; "
                "a stripped build collects nothing)")
# callgrind names a recursive function's deeper contexts `name'2`, `name'3`: one function all the same
_RECURSION = re.compile(r"'\d+$")
_COMPRESSED = re.compile(r"\(\d+\)")  # `(12) name` defines a compressed name, `(12)` refers to it


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one callgrind file says was executed (Ir > 0), by distinct address, line, page and function."""

    instructions: int
    code_lines: int
    pages: int
    functions: int
    lines_by_object: dict[str, int]
    lines_by_function: dict[tuple[str, str], int]  # (object, function) -> code lines

    def top_functions(self, n: int = TOP_FUNCTIONS) -> list[tuple[str, str, int]]:
        ranked = sorted(self.lines_by_function.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(obj, fn, lines) for (obj, fn), lines in ranked[:n]]


class _Reader:
    """The state of a walk through an uncompressed callgrind file written with `--dump-instr=yes`."""

    def __init__(self) -> None:
        self.obj = ""
        self.fn = ""
        self.after_call = False
        self.columns = 0  # position columns before the costs
        self.instr_at = 0
        self.ir_at = -1
        self.instructions = 0
        # addresses are relative to their object in callgrind's output, so each is keyed by its object;
        # objects are mapped page-aligned, so an offset's line and page are the loaded code's
        self.lines: dict[str, set[int]] = {}
        self.fn_lines: dict[tuple[str, str], set[int]] = {}

    def header(self, key: str, value: str) -> None:
        if key == "positions":
            names = value.split()
            if "instr" not in names:
                raise ValueError("callgrind file without instruction addresses: run it with --dump-instr=yes")
            self.columns, self.instr_at = len(names), names.index("instr")
        elif key == "events":
            names = value.split()
            self.ir_at = names.index("Ir") if "Ir" in names else -1

    def spec(self, key: str, value: str) -> None:
        if _COMPRESSED.match(value):
            raise ValueError(f"compressed name {key}={value!r}: run callgrind with --compress-strings=no")
        if key == "ob":
            self.obj = value
        elif key == "fn":
            self.fn = _RECURSION.sub("", value)
        elif key == "calls":
            self.after_call = True  # the next cost line is the call's inclusive cost, not this function's

    def cost(self, line: str) -> None:
        if line[0] in "+-*":
            raise ValueError(f"compressed position {line.split()[0]!r}: run callgrind with --compress-pos=no")
        if self.after_call:
            self.after_call = False
            return
        if not self.columns:
            raise ValueError("a cost line before the `positions:` header: not a callgrind file of --dump-instr=yes")
        fields = line.split()
        at = self.columns + self.ir_at
        ir = int(fields[at]) if self.ir_at >= 0 and at < len(fields) else 0
        if ir <= 0:
            return
        self.instructions += ir
        line_no = int(fields[self.instr_at], 16) >> LINE_BITS
        self.lines.setdefault(self.obj, set()).add(line_no)
        self.fn_lines.setdefault((self.obj, self.fn), set()).add(line_no)

    def footprint(self) -> Footprint:
        pages = {(obj, n >> (PAGE_BITS - LINE_BITS)) for obj, lines in self.lines.items() for n in lines}
        by_object = {obj: len(lines) for obj, lines in self.lines.items()}
        return Footprint(self.instructions, sum(by_object.values()), len(pages), len(self.fn_lines),
                         dict(sorted(by_object.items(), key=lambda kv: (-kv[1], kv[0]))),
                         {key: len(lines) for key, lines in self.fn_lines.items()})


# a header (`events: Ir`) or a specification (`fn=name`): a lowercase key, then its separator
_KEYED = re.compile(r"([a-z]+)([:=])\s*(.*)")

def read_callgrind(source: Path | str | Iterable[str]) -> Footprint:
    """The footprint in a callgrind file (a path, or its lines)."""
    if isinstance(source, (Path, str)):
        with open(source, encoding="utf-8", errors="replace") as f:
            return read_callgrind(f)
    reader = _Reader()
    for raw in source:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line[0].isdigit() or line[0] in "+-*":
            reader.cost(line)
        elif keyed := _KEYED.match(line):
            key, sep, value = keyed.groups()
            if sep == ":":
                reader.header(key, value)
            else:  # ob=, fn=, calls= count; cob=, cfn=, fl=, fi=, fe=, jump= ... say nothing we count
                reader.spec(key, value)
    return reader.footprint()


def run_piece(name: str, runs: int) -> None:
    """The measured process's side: warm the piece up, then run it `runs` times, each inside its own
    `sys.call_tracing`, the one C function callgrind is told to collect in (the loop stays outside: its
    range and counter are not the piece's code)."""
    fn = PIECES[name]()
    for _ in range(WARMUP_RUNS):
        fn()
    for _ in range(runs):
        sys.call_tracing(fn, ())


def callgrind_argv(python: str, piece: str, runs: int, out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", "--toggle-collect=sys_call_tracing", "--dump-instr=yes",
            "--compress-strings=no", "--compress-pos=no", f"--callgrind-out-file={out}",
            python, "-m", "bench.footprint", "--run-piece", piece, "--runs", str(runs)]


def measure_piece(python: str, piece: str, runs: int, outdir: Path) -> Footprint:
    """One valgrind run of `piece` under `python`, from this checkout (so its `bench` and `gateway` run)."""
    out = outdir / f"callgrind.{piece}.out"
    # str hashes are salted per process, and dict probes and set orders follow them: one seed for all
    # runs keeps the counts the same from run to run (about 1% apart otherwise)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(callgrind_argv(python, piece, runs, out), cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"valgrind failed on the {piece} piece (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return collected(piece, read_callgrind(out))


def collected(piece: str, fp: Footprint) -> Footprint:
    """`fp` if callgrind collected something: nothing collected means it never saw `sys_call_tracing`."""
    if fp.instructions == 0:
        raise SystemExit(f"no instructions collected for the {piece} piece: {SYMBOLS_NOTE}")
    return fp


def _kib(lines: int) -> str:
    return f"{lines:,} ({lines * (1 << LINE_BITS) / 1024:.1f})"


def summary_table(results: dict[str, Footprint], runs: int) -> list[str]:
    rows = ["| piece | instructions per run | code lines (KiB) | pages | functions |",
            "| --- | ---: | ---: | ---: | ---: |"]
    rows += [f"| {name} | {fp.instructions / runs:,.0f} | {_kib(fp.code_lines)} | {fp.pages:,} | {fp.functions:,} |"
             for name, fp in results.items()]
    return rows


def piece_detail(name: str, fp: Footprint) -> list[str]:
    """The piece's code lines by object (the top few) and its top functions by code lines."""
    rows = ["", f"### {name}", "", "| object | code lines (KiB) |", "| --- | ---: |"]
    rows += [f"| {Path(obj).name} | {_kib(n)} |" for obj, n in list(fp.lines_by_object.items())[:TOP_OBJECTS]]
    rows += ["", "| function | object | code lines |", "| --- | --- | ---: |"]
    rows += [f"| `{fn}` | {Path(obj).name} | {n:,} |" for obj, fn, n in fp.top_functions()]
    return rows


def report(results: dict[str, Footprint], runs: int, python: str) -> str:
    head = [f"{python}, {runs} run(s) per piece after {WARMUP_RUNS} to warm up, PYTHONHASHSEED=0; code lines: "
            f"distinct 64-byte lines of machine code executed; {SYMBOLS_NOTE}", ""]
    rows = head + summary_table(results, runs)
    for name, fp in results.items():
        rows += piece_detail(name, fp)
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.footprint", description=__doc__.splitlines()[0])
    p.add_argument("--pieces", default=",".join(PIECES), help="comma-separated pieces of bench.cold_wake")
    p.add_argument("--runs", type=int, default=1, help="runs measured per piece (a cold hop runs it once)")
    p.add_argument("--python", default=sys.executable, help="the interpreter to measure under")
    p.add_argument("--keep", type=Path, help="keep the callgrind files in this directory")
    p.add_argument("--run-piece", choices=sorted(PIECES), help=argparse.SUPPRESS)  # the measured process
    args = p.parse_args(argv)
    if args.run_piece:
        return run_piece(args.run_piece, args.runs)
    pieces = args.pieces.split(",")
    if unknown := [name for name in pieces if name not in PIECES]:
        p.error(f"unknown piece(s) {', '.join(unknown)}; known: {', '.join(PIECES)}")
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.footprint needs valgrind (apt-get install valgrind)")
    python = os.path.abspath(shutil.which(args.python) or args.python)  # a venv's link is kept: it is the venv
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        outdir = (args.keep or Path(tmp)).resolve()  # valgrind runs from the checkout, not from here
        results = {name: measure_piece(python, name, args.runs, outdir) for name in pieces}
    print(report(results, args.runs, python))


if __name__ == "__main__":
    main()
