"""The cost of a request body that trickles in as 1-byte chunks, one chunk per read (the worst case of
issue "Harden the HTTP edges": the old reader summed every part on every read, quadratic in the
chunk count). CPU seconds of the request reader alone, for growing counts, so linearity shows.

    python -m bench.http_trickle [--baseline DIR]   # DIR: a checkout whose reader to measure beside

The baseline's reader (gateway/core/http1_request.RequestReader before this change) is run in a
subprocess with DIR first on sys.path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

COUNTS = (10_000, 100_000, 1_000_000)
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"


def measure(count: int) -> float:
    try:
        from gateway.http.reader import RequestReader
    except ImportError:  # a checkout from before the llhttp reader
        from gateway.core.http1_request import RequestReader  # type: ignore[attr-defined,no-redef]
    reader = RequestReader(count + 1)
    reader.feed(HEAD)
    piece = b"1\r\nx\r\n"
    t0 = time.process_time()
    for _ in range(count):
        reader.feed(piece)
    got = reader.feed(b"0\r\n\r\n")
    spent = time.process_time() - t0
    assert got is not None and len(got[1]) == count
    return spent


def run_in(checkout: str, counts: tuple[int, ...]) -> dict[int, float]:
    """This script, run with `checkout` first on the path (its `gateway` package is the one measured)."""
    env = {**os.environ, "PYTHONPATH": checkout}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--json", ",".join(map(str, counts))],
                         env=env, capture_output=True, text=True, check=True, cwd=checkout, timeout=900)
    return {int(k): v for k, v in json.loads(out.stdout).items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--baseline", help="another checkout to measure beside this one")
    p.add_argument("--baseline-counts", default="10000,30000,100000",
                   help="the counts for the baseline (a quadratic reader takes minutes at 1M)")
    p.add_argument("--json", help="measure these counts and print them as JSON (used for the baseline)")
    args = p.parse_args()
    if args.json:
        print(json.dumps({c: measure(int(c)) for c in args.json.split(",")}))
        return
    mine = {c: measure(c) for c in COUNTS}
    print("| chunks (1 byte, one per read) | CPU s, this checkout | µs per chunk |")
    print("| --- | --- | --- |")
    for c, s in mine.items():
        print(f"| {c:,} | {s:.3f} | {s / c * 1e6:.2f} |")
    if args.baseline:
        counts = tuple(int(c) for c in args.baseline_counts.split(","))
        base = run_in(os.path.abspath(args.baseline), counts)
        print("\n| chunks | CPU s, baseline | µs per chunk |")
        print("| --- | --- | --- |")
        for c, s in base.items():
            print(f"| {c:,} | {s:.3f} | {s / c * 1e6:.2f} |")


if __name__ == "__main__":
    main()
