"""Redaction window benchmark: `python -m bench.bench_redaction [--write]`.

Streams ordinary prose through three variants, in the same run, as 3-6 byte deltas (what providers
send for one token): our redaction window with the `secrets` and `pii` rule sets, a fixed 128-byte
window (the naive approach of the ADR in shared/seeds, implemented below), and no redaction. It
reports the bytes held back after each delta, how far the first released byte lags the first
pushed one, and the CPU cost per MB. With --write it rewrites bench/REDACTION.md.

Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.core.redact.window import Redactor

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "redaction" / "negatives"
PROSE = ("postmortem.md", "notes.md", "README_tool.md", "CHANGELOG.md")
CODE = ("service.py", "server.go", "client.js", "app.log", "deploy.yaml", "terminal.txt")
# Prose without spaces between words, written for this bench (original text, not taken from
# anywhere): an incident summary in Japanese and in Chinese, a Kubernetes how-to in Japanese with
# English terms. They are negatives of the corpus too (no secret, nothing to mask).
JAPANESE, CHINESE, MIXED = ("ja_prose.md",), ("zh_prose.md",), ("en_ja_prose.md",)
SECTIONS = (("Prose (postmortem, team notes, README, changelog)", PROSE),
            ("Code, logs and config (for comparison)", CODE),
            ("Japanese prose (incident summary)", JAPANESE),
            ("Chinese prose (incident summary)", CHINESE),
            ("Mixed English/Japanese prose (a Kubernetes how-to)", MIXED))
AB_ROUNDS = 5
NOSPACE_ROUNDS = 2
TARGET_BYTES = 1 << 20
FIXED_WINDOW = 128


class Window:
    """The interface every variant offers: push a delta, get what may be released."""

    def push(self, delta: str) -> str:
        raise NotImplementedError

    def flush(self) -> str:
        raise NotImplementedError


class PassThrough(Window):
    def push(self, delta: str) -> str:
        return delta

    def flush(self) -> str:
        return ""


class FixedByteWindow(Window):
    """The naive baseline: keep the last 128 bytes, rescan the whole buffer on every delta, and
    release what is older, never cutting through a match found in the buffer."""

    def __init__(self, redactor: Redactor, size: int = FIXED_WINDOW) -> None:
        assert redactor.spec.detect is not None
        self._detect = redactor.spec.detect
        self._redactor = redactor
        self._size = size
        self._buf = ""
        self._counts: dict[str, int] = {}

    def push(self, delta: str) -> str:
        self._buf += delta
        excess = len(self._buf.encode()) - self._size
        if excess <= 0:
            return ""
        cut = len(self._buf.encode()[:excess].decode(errors="ignore"))
        for m in self._detect.finditer(self._buf):
            if m.start() < cut < m.end():
                cut = m.start()
        out, self._buf = self._buf[:cut], self._buf[cut:]
        return self._redactor.mask(out, self._counts)

    def flush(self) -> str:
        out, self._buf = self._buf, ""
        return self._redactor.mask(out, self._counts)


class OurWindow(Window):
    def __init__(self, redactor: Redactor) -> None:
        self._window = redactor.window()

    def push(self, delta: str) -> str:
        return self._window.push(delta)

    def flush(self) -> str:
        return self._window.flush()


def deltas(text: str, rnd: random.Random) -> Iterator[str]:
    """3-6 UTF-8 bytes each, never splitting a character."""
    i = 0
    while i < len(text):
        want, j, size = rnd.randint(3, 6), i, 0
        while j < len(text) and size < want:
            size += len(text[j].encode())
            j += 1
        yield text[i:j]
        i = j


def answers(files: tuple[str, ...]) -> list[str]:
    """The corpus cut at blank lines into answer-sized texts, repeated up to TARGET_BYTES."""
    paragraphs = [p.strip() + "\n" for f in files for p in (CORPUS / f).read_text().split("\n\n") if p.strip()]
    out: list[str] = []
    while sum(len(a.encode()) for a in out) < TARGET_BYTES:
        out.extend(paragraphs)
    return out


@dataclass
class Result:
    name: str
    held: list[int]  # bytes held back after each delta
    lag_deltas: list[int]  # per answer: deltas pushed before the first release, minus one
    first_cpu_us: list[float]  # per answer: CPU in push() until the first release
    cpu_s: float = 0.0
    total_bytes: int = 0


def run(name: str, make: Callable[[], Window], texts: list[list[str]]) -> Result:
    result = Result(name, [], [], [])
    cpu_start = time.process_time()
    for pieces in texts:
        window, pushed, released, first = make(), 0, 0, -1
        t0 = time.perf_counter_ns()
        for k, piece in enumerate(pieces):
            out = window.push(piece)
            pushed += len(piece.encode())
            released += len(out.encode())
            if first < 0 and out:
                first = k
                result.first_cpu_us.append((time.perf_counter_ns() - t0) / 1000)
            result.held.append(pushed - released)
        window.flush()
        result.lag_deltas.append(first if first >= 0 else len(pieces))
        result.total_bytes += pushed
    result.cpu_s = time.process_time() - cpu_start
    return result


def pct(values: list[int] | list[float], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown")
    return (f"{cpu}, {os.cpu_count()} logical CPUs (shared), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def table(results: list[Result], off: Result, mean_word: float, mean_delta: float) -> str:
    rows = ["| variant | held back, median | held back, p99 | first release lags, median / p90 / p99 "
            "| CPU to first release, median | CPU per MB | added CPU per MB |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        per_mb = r.cpu_s / (r.total_bytes / 1e6)
        added = per_mb - off.cpu_s / (off.total_bytes / 1e6)
        rows.append(
            f"| {r.name} | {statistics.median(r.held):.0f} B | {pct(r.held, 0.99):.0f} B "
            f"| {statistics.median(r.lag_deltas):.0f} / {pct(r.lag_deltas, 0.9):.0f} / "
            f"{pct(r.lag_deltas, 0.99):.0f} deltas "
            f"| {statistics.median(r.first_cpu_us):.1f} µs | {per_mb * 1000:.0f} ms | {added * 1000:.0f} ms |")
    rows.append("")
    if mean_word > 8 * mean_delta:  # a script without spaces: a "word" is a sentence
        rows.append(f"A delta is {mean_delta:.1f} bytes; the text has few spaces (a run between two is "
                    f"{mean_word:.0f} bytes on average), so only characters no rule can match end its runs.")
        return "\n".join(rows)
    rows.append(f"A word (with its space) is {mean_word:.1f} bytes on average, a delta {mean_delta:.1f} bytes, "
                f"so one word is {mean_word / mean_delta:.1f} deltas.")
    return "\n".join(rows)


def bench(files: tuple[str, ...], seed: int) -> tuple[list[Result], float, float]:
    redactor = Redactor.compile(["secrets", "pii"], [])
    rnd = random.Random(seed)
    texts = [list(deltas(a, rnd)) for a in answers(files)]
    variants: list[tuple[str, Callable[[], Window]]] = [
        ("redaction off", PassThrough),
        ("fixed 128-byte window", lambda: FixedByteWindow(redactor)),
        ("our window (secrets + pii)", lambda: OurWindow(redactor)),
    ]
    results = [run(name, make, texts) for name, make in variants]
    words = [w for t in texts for w in "".join(t).split()]
    mean_word = sum(len(w.encode()) + 1 for w in words) / len(words)
    pieces = [p for t in texts for p in t]
    mean_delta = sum(len(p.encode()) for p in pieces) / len(pieces)
    return results, mean_word, mean_delta


ADVERSARIAL = {
    "every word opens a card candidate (`4111 4111 ...`)": "4111",
    "every word opens a bearer candidate (`Bearer Bearer ...`)": "Bearer",
    "every word opens an IBAN candidate (`DE89 DE89 ...`)": "DE89",
    "every word fires a hint (`sk- sk- ...`)": "sk-",
    "every word is an e-mail (`a@b.co a@b.co ...`)": "a@b.co",
}


def adversarial() -> str:
    """Worst cases for the exact path: text built so that every word needs it."""
    redactor = Redactor.compile(["secrets", "pii"], [])
    rows = ["| text (1 MB) | streamed, CPU per MB | one-shot, CPU per MB |", "| --- | --- | --- |"]
    rnd = random.Random(0)
    for label, word in ADVERSARIAL.items():
        text = " ".join([word] * (TARGET_BYTES // (len(word) + 1)))
        pieces = list(deltas(text, rnd))
        start = time.process_time()
        run("", lambda: OurWindow(redactor), [pieces])
        streamed = time.process_time() - start
        start = time.process_time()
        redactor.redact(text)
        one_shot = time.process_time() - start
        rows.append(f"| {label} | {streamed * 1000 / (len(text) / 1e6):.0f} ms "
                    f"| {one_shot * 1000 / (len(text) / 1e6):.0f} ms |")
    return "\n".join(rows)


def english_cpu_per_mb(seed: int) -> float:
    """CPU per MB of our window on the English prose (the A/B figure)."""
    redactor = Redactor.compile(["secrets", "pii"], [])
    texts = [list(deltas(a, random.Random(seed))) for a in answers(PROSE)]
    r = run("", lambda: OurWindow(redactor), texts)
    return r.cpu_s / (r.total_bytes / 1e6)


def nospace_us_per_delta(seed: int, reads: str) -> float:
    """CPU µs per 8-character delta of text without any whitespace (S3n's text, `bench.textgen`'s
    `nospace`, 1000 deltas an answer) through our window, the deltas handed over as the relay does
    (`push_together`) in reads of 32-64 (`reads="some"`) or a whole answer in one read (`"all"`, as S3n's
    unpaced upstream sends it), or one by one (`"one"`, `push`)."""
    from bench.textgen import pieces  # the checkout's own: the A/B runs this in either

    redactor = Redactor.compile(["secrets", "pii"], [])
    rnd = random.Random(seed)
    streams = [pieces(s, 1000, 8, nospace=True) for s in range(16)]
    n = 0
    start = time.process_time()
    for _ in range(NOSPACE_ROUNDS):
        for stream in streams:
            push_as_read(redactor, stream, reads, rnd)
            n += len(stream)
    return (time.process_time() - start) / n * 1e6


def push_as_read(redactor: Redactor, stream: Sequence[str], reads: str, rnd: random.Random) -> None:
    """One answer's deltas through a fresh window, handed over as the relay does: a whole answer in one
    read (`"all"`), reads of 32-64 (`"some"`), or one by one (`"one"`, `push`)."""
    window = redactor.window()
    i = 0
    while i < len(stream):
        k = rnd.randint(32, 64) if reads == "some" else len(stream) if reads == "all" else 1
        if k == 1:
            window.push(stream[i])
        else:
            window.push_together(list(stream[i:i + k]))
        i += k
    window.flush()


def _measure_in(checkout: Path, call: str) -> float:
    """`call` (an expression over this module, `m`) with the gateway of `checkout` (this file stays ours)."""
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('b', sys.argv[1]); "
            "m = sys.modules['b'] = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            f"print({call})")
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", code, __file__], env=env, check=True,
                         capture_output=True, text=True, cwd=checkout)
    return float(out.stdout.strip())


_NOSPACE = "text without whitespace (S3n), CPU µs per 8-character delta"
_AB = (("English prose, CPU ms per MB", "m.english_cpu_per_mb({seed}) * 1000"),
       (f"{_NOSPACE}, a whole answer in one read", "m.nospace_us_per_delta({seed}, 'all')"),
       (f"{_NOSPACE}, in reads of 32-64", "m.nospace_us_per_delta({seed}, 'some')"),
       (f"{_NOSPACE}, one by one", "m.nospace_us_per_delta({seed}, 'one')"))


def ab(baseline: Path, seed: int) -> str:
    """Our window in this checkout and in `baseline`, alternately, in one run (one process each)."""
    rows = [f"Our window, median of {AB_ROUNDS} alternating runs (one process each):", "",
            "| measure | this code | baseline checkout | change |", "| --- | --- | --- | --- |"]
    for label, call in _AB:
        mine: list[float] = []
        base: list[float] = []
        for _ in range(AB_ROUNDS):
            mine.append(_measure_in(ROOT, call.format(seed=seed)))
            base.append(_measure_in(baseline, call.format(seed=seed)))
        m, b = statistics.median(mine), statistics.median(base)
        rows.append(f"| {label} | {m:.3g} (spread {min(mine):.3g}-{max(mine):.3g}) "
                    f"| {b:.3g} (spread {min(base):.3g}-{max(base):.3g}) | {(m / b - 1) * 100:+.1f} % |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite bench/REDACTION.md")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="another checkout (git worktree) for an A/B of our window "
                        "on English prose and on text without whitespace")
    parser.add_argument("--ab-only", action="store_true", help="with --baseline: only the A/B")
    args = parser.parse_args(argv)
    sections = []
    for label, files in () if args.ab_only and args.baseline else SECTIONS:
        results, mean_word, mean_delta = bench(files, args.seed)
        sections.append(f"#### {label}, {results[0].total_bytes / 1e6:.2f} MB\n\n"
                        + table(results, results[0], mean_word, mean_delta))
    if not (args.ab_only and args.baseline):
        sections.append("#### Adversarial text (our window only)\n\n" + adversarial())
        us = {reads: nospace_us_per_delta(args.seed, reads) for reads in ("all", "some", "one")}
        sections.append("#### Text without whitespace (S3n's text, our window only)\n\n"
                        f"CPU per 8-character delta: a whole answer in one read {us['all']:.2f} µs, in reads of "
                        f"32-64 {us['some']:.2f} µs, one by one {us['one']:.2f} µs.")
    if args.baseline is not None:
        sections.append("#### Before and after, one run\n\n" + ab(args.baseline.resolve(), args.seed))
    report = "\n\n".join(sections)
    print(f"Machine: {machine()}\n\n{report}")
    if args.write:
        write(report)
    return 0


def write(report: str) -> None:
    path = ROOT / "bench" / "REDACTION.md"
    text = path.read_text() if path.exists() else ""
    start = text.find("<!-- figures -->")
    end = text.find("<!-- /figures -->")
    figures = (f"<!-- figures -->\nMeasured {time.strftime('%Y-%m-%d')} on {machine()}; "
               f"`python -m bench.bench_redaction --write`.\n\n{report}\n<!-- /figures -->")
    if start < 0 or end < 0:
        text = text + "\n" + figures + "\n"
    else:
        text = text[:start] + figures + text[end + len("<!-- /figures -->"):]
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
