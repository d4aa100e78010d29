"""The redaction window on text without whitespace, by kind of text: `python -m bench.redact_window`.

Prints the CPU µs per 8-character delta of `secrets`+`pii` through our window for each kind of text,
the deltas handed over as the relay does: a whole answer in one read (`push_together`, as S3n's
unpaced upstream sends it), reads of 32-64 deltas, and one by one (`push`). The texts are random over
each kind's alphabet (seeded), 1,000 deltas an answer; "letters" is S3n's own text (`bench.textgen`).
bench/README.md, "Goal 5", has the figures. Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from collections.abc import Callable

from bench.bench_redaction import push_as_read
from bench.textgen import pieces
from gateway.core.redact.window import Redactor

DELTAS = 1000
DELTA_CHARS = 8
ANSWERS = 8


def _alphabet(chars: str) -> Callable[[random.Random], str]:
    def make(rnd: random.Random) -> str:
        return "".join(rnd.choices(chars, k=DELTAS * DELTA_CHARS))
    return make


def _letters(rnd: random.Random) -> str:
    return "".join(pieces(rnd.randrange(1 << 20), DELTAS, DELTA_CHARS, nospace=True))


def _repeated(unit: str) -> Callable[[random.Random], str]:
    def make(rnd: random.Random) -> str:
        return (unit * (DELTAS * DELTA_CHARS // len(unit) + 1))[:DELTAS * DELTA_CHARS]
    return make


def _json(rnd: random.Random) -> str:
    """Minified JSON records (keys, words, numbers, ids, dates), as a model writes a tool's output."""
    records: list[str] = []
    size = 0
    while size < DELTAS * DELTA_CHARS:
        record = json.dumps({"id": rnd.randrange(10 ** 9), "name": "".join(rnd.choices(string.ascii_lowercase, k=8)),
                             "score": round(rnd.random() * 100, 2), "tags": ["a", "bc"], "ok": rnd.random() < 0.5,
                             "at": f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}"}, separators=(",", ":"))
        records.append(record)
        size += len(record) + 1
    return ("[" + ",".join(records) + "]")[:DELTAS * DELTA_CHARS]


CJK = "".join(map(chr, range(0x4E00, 0x4E00 + 500)))
KINDS: dict[str, Callable[[random.Random], str]] = {
    "letters (S3n's)": _letters,
    "letters and digits": _alphabet(string.ascii_letters + string.digits),
    "digits": _alphabet(string.digits),
    "hex": _alphabet(string.digits + "abcdef"),
    "base64 alphabet": _alphabet(string.ascii_letters + string.digits + "+/"),
    "letters and `-_.:/@`": _alphabet(string.ascii_letters + "-_.:/@"),
    "`a@b.` repeated": _repeated("a@b."),
    "minified JSON": _json,
    "CJK": _alphabet(CJK),
}
READS = ("all", "some", "one")


def us_per_delta(redactor: Redactor, texts: list[str], reads: str, seed: int) -> float:
    """CPU µs per delta of the window over `texts`, each cut into 8-character deltas, handed over in
    one read (`all`), reads of 32-64 (`some`) or one by one (`one`)."""
    rnd = random.Random(seed)
    streams = [[t[i:i + DELTA_CHARS] for i in range(0, len(t), DELTA_CHARS)] for t in texts]
    n = 0
    start = time.process_time()
    for stream in streams:
        push_as_read(redactor, stream, reads, rnd)
        n += len(stream)
    return (time.process_time() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="the best of this many runs per figure")
    args = parser.parse_args(argv)
    redactor = Redactor.compile(["secrets", "pii"], [])
    print("| text, no whitespace | µs per delta (one read / reads of 32-64 / one by one) |")
    print("| --- | --- |")
    for name, make in KINDS.items():
        rnd = random.Random(args.seed)
        texts = [make(rnd) for _ in range(ANSWERS)]
        figures = [min(us_per_delta(redactor, texts, reads, args.seed) for _ in range(args.rounds))
                   for reads in READS]
        print(f"| {name} | {' / '.join(f'{f:.2f}' for f in figures)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
