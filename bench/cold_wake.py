"""What the first-token path's code costs after the process has slept (issue #34, point 4).

S1's gateway sleeps between events: 50 ms until the upstream's first token, 5 ms between chunks. This
runs two pieces of the gateway's first-token path in process, each on S1's own bytes:

- `parse`: the HTTP server's request reader (`gateway.http.reader`, llhttp) on S1's request, the first
  work of the "in" hop (client request -> upstream request);
- `core`: a chat stream core's first read (`ChatStream` with the OpenAI parser) on S1's first upstream
  read (role event + first delta), the parse of the "out" hop (first token -> client write);

and `noop`, one dict lookup: the interpreter's own floor, what any Python code pays to run at all;

first back to back (hot), then after sleeping `gap` ms, several ways:

- `first`: each piece once, right after the sleep (what a hop pays);
- `again`: the same piece at once a second time (what is left once its own code and data are back in
  the caches: a cost that came with waking up, or with reaching a core, would be paid here too);
- `after spin`: the sleep, then 0.3 ms of a busy loop, then the piece (a core that is awake and
  running other code when the piece starts).

Samples alternate the pieces, so neither warms the other more than the hop order does. With `--wait
spin` each gap is a busy loop instead of a sleep: the process never leaves its core, so a cost that is
still there is not the price of sleeping (an idle core halted, its caches given to other work) but of
time passing while the machine's shared caches serve others.

    python -m bench.cold_wake [--gaps 0,1,5,50,150] [--samples 60] [--wait sleep|spin]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.raw_client import CHUNK_CHARS, CHUNKS, request_parts
from bench.textgen import stream_events
from gateway.core.chat.stream import ChatStream
from gateway.http.reader import RequestReader
from gateway.providers.convert.openai_chat import OpenAIStreamParser

SPIN_S = 0.0003
MAX_BODY = 1 << 20


def parse_piece(seed: int = 1) -> Callable[[], None]:
    """The reader on S1's request (head and body in one read, as the bench's clients write it)."""
    head, body = request_parts("127.0.0.1", 8080, "/v1/chat/completions", seed, True)
    request = head + body
    reader = RequestReader(MAX_BODY)

    def run() -> None:
        got = reader.feed(request)
        if got is None or got[1] != body:
            raise AssertionError("the reader did not return S1's request")

    return run


def core_piece(seed: int = 1) -> Callable[[], None]:
    """A new stream core's first read: S1's first upstream read, the role event and the first delta."""
    first = stream_events(seed, CHUNKS, CHUNK_CHARS, "up-model", False)[0]

    def run() -> None:
        stream = ChatStream(OpenAIStreamParser(), "bench")
        stream.feed(first)
        if not stream.committable:
            raise AssertionError("the first read did not make the stream committable")

    return run


def noop_piece(seed: int = 1) -> Callable[[], None]:
    """One dict lookup: no gateway code, only the interpreter's call and the timer around it."""
    table = {seed: seed}

    def run() -> None:
        if table.get(seed) != seed:
            raise AssertionError("the lookup failed")

    return run


PIECES: dict[str, Callable[[], Callable[[], None]]] = {"parse": parse_piece, "core": core_piece,
                                                        "noop": noop_piece}


@dataclass(slots=True)
class Row:
    gap_ms: float
    piece: str
    first_us: float
    again_us: float
    after_spin_us: float


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


WAITS: dict[str, Callable[[float], None]] = {"sleep": time.sleep, "spin": _spin}  # how a gap passes


def measure(gaps_ms: list[float], samples: int, sleep: Callable[[float], None] = time.sleep) -> list[Row]:
    """Median microseconds per piece and gap (a gap of 0: no sleep, the hot figure)."""
    pieces = {name: make() for name, make in PIECES.items()}
    for fn in pieces.values():
        fn()  # imports, the specialising interpreter's first runs
    rows: list[Row] = []
    for gap in gaps_ms:
        first: dict[str, list[float]] = {name: [] for name in pieces}
        again: dict[str, list[float]] = {name: [] for name in pieces}
        spun: dict[str, list[float]] = {name: [] for name in pieces}
        for i in range(samples):
            order = list(pieces) if i % 2 == 0 else list(reversed(pieces))
            for name in order:
                if gap:
                    sleep(gap / 1000)
                first[name].append(_timed(pieces[name]))
                again[name].append(_timed(pieces[name]))
                if gap:
                    sleep(gap / 1000)
                _spin(SPIN_S)
                spun[name].append(_timed(pieces[name]))
        med = statistics.median
        rows += [Row(gap, name, med(first[name]), med(again[name]), med(spun[name])) for name in pieces]
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| sleep before | piece | first run µs | run again at once µs | after 0.3 ms of spin µs |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        gap = "none (hot)" if r.gap_ms == 0 else f"{r.gap_ms:g} ms"
        lines.append(f"| {gap} | {r.piece} | {r.first_us:.1f} | {r.again_us:.1f} | {r.after_spin_us:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.cold_wake", description=__doc__.splitlines()[0])
    p.add_argument("--gaps", default="0,1,5,50,150", help="comma-separated sleeps in ms (0: hot)")
    p.add_argument("--samples", type=int, default=60)
    p.add_argument("--wait", choices=sorted(WAITS), default="sleep", help="how a gap passes (see above)")
    args = p.parse_args(argv)
    if args.wait == "spin":
        print("gaps spun, not slept: the process never leaves its core")
    print(table(measure([float(g) for g in args.gaps.split(",")], args.samples, WAITS[args.wait])))


if __name__ == "__main__":
    main()
