"""What the per-request log line costs (issue #63; bench/README.md, "#63, 2026-12-07, third stop"): the
gateway's JSON configuration writing a request's line to a file, through structlog's bound logger
(`log.info("request", **fields)`, as the recorder wrote it) and through `observe.logs.write_info` (as it
writes it now), each with structlog's own `TimeStamper` and `os.getpid()` per line (the chain before)
and with the gateway's (a second's text formatted once, the pid read once per process).

The figures are CPU µs per line (user and system: the write is one syscall a line, as in production,
where each line is one write on a pipe shared by the workers).

    python -m bench.log_line [--lines 50000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import structlog

from gateway.observe import logs

# A streamed request's line, as the recorder writes it (docs/reference.md, "Logs")
FIELDS: dict[str, Any] = {
    "request_id": "453f645acca8977a000000000000430e", "api": "chat", "model": "m", "model_unresolved": None,
    "requested_model": "m", "deployment": "up/up-model", "reason": None, "key": "team-a", "stream": True,
    "status": 200, "outcome": "ok", "attempts": 1, "ttft_ms": 51.2, "overhead_ms": 0.412, "duration_ms": 312.5,
    "input_tokens": 11, "output_tokens": 50, "cached_tokens": 0, "cache_creation_tokens": 0,
    "cache_markers_dropped": 0, "reasoning_tokens": 0, "estimated": False, "cost_usd": 0.00018,
    "redactions": 0, "guardrails": {}, "stream_error": None, "cache_hit": False, "continued": None,
    "session_hash": None, "affinity": None, "subject_hash": None, "transport": "http",
}


def _pid(_: object, __: str, event: dict[str, Any]) -> dict[str, Any]:
    event["pid"] = os.getpid()
    return event


def configure(out: Any, chain: str) -> None:
    """The gateway's JSON configuration on `out`; `chain` "before" swaps in structlog's stamper and a
    getpid per line, as the chain was."""
    sys.stdout = out
    logs.configure_logging("info", "json")
    if chain == "before":
        processors = structlog.get_config()["processors"]
        processors[processors.index(logs._add_pid)] = _pid
        processors[processors.index(logs._utc_timestamp)] = structlog.processors.TimeStamper(fmt="iso", utc=True)


def per_line_us(write: Callable[[], None], lines: int) -> float:
    t0 = time.process_time()
    for _ in range(lines):
        write()
    return (time.process_time() - t0) / lines * 1e6


def ways() -> dict[str, Callable[[], None]]:
    """The two ways to write a line; the logger is made after each configuration, as the recorder's was
    (a module's lazy logger, bound and cached at its first line)."""
    log = structlog.get_logger("bench")
    return {"log.info": lambda: log.info("request", **FIELDS),
            "write_info": lambda: logs.write_info("request", dict(FIELDS))}


def measure(lines: int, repeat: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}
    stdout, saved = sys.stdout, structlog.get_config()
    with tempfile.TemporaryFile("w+") as out:
        try:
            for _ in range(repeat):
                for chain in ("before", "now"):
                    configure(out, chain)
                    for name, write in ways().items():
                        figures.setdefault(f"{name}, chain {chain}", []).append(per_line_us(write, lines))
                    out.truncate(0)
        finally:
            sys.stdout = stdout
            structlog.configure(**saved)
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lines", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    for name, runs in measure(args.lines, args.repeat).items():
        runs.sort()
        print(f"{name:26s} median {runs[len(runs) // 2]:6.2f} µs a line  (runs: "
              f"{', '.join(f'{r:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
