"""Memory at start-up: `python -m bench.startup_rss [--baseline DIR] [--runs N]` (issue #34, acceptance 5).

Each target is a fresh `gateway serve` process (one worker), redaction `secrets`+`pii` on and off. Once it
answers `/healthz`, its peak since start (VmHWM, so the compile of the redaction profiles at load is in
it) and, after a settle of a second, its RSS (VmRSS) are read from /proc; the figure is peak / settled.
Before the fix the peak came from deriving the rules' run-break characters (a million one-character
strings joined). No request is sent: the upstream port is never dialled.

`--baseline DIR` measures the gateway of another checkout too (`git worktree add DIR <commit>`), in the
same run, runs alternating. Not a test: nothing here asserts. Figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.procstat import usage
from bench.servers import ROOT, free_port, gateway_config, start_gateway

SETTLE_S = 1.0


def measure(name: str, workdir: Path, config: Path, source: Path) -> tuple[float, float, float]:
    """(peak MiB, settled MiB, seconds to ready) of one fresh process."""
    t0 = time.monotonic()
    gw = start_gateway(name, workdir, config, source=source)
    ready = time.monotonic() - t0
    try:
        time.sleep(SETTLE_S)  # let start-up's garbage go; nothing to synchronise with, a reading
        u = usage(gw.pid)
        return u.hwm_kib / 1024, u.rss_kib / 1024, ready
    finally:
        gw.stop()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.startup_rss", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="another checkout, measured beside this one")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gateway-startup-"))
    port = free_port()
    configs = {}
    for redaction in (True, False):
        path = workdir / f"gateway-{'redact' if redaction else 'plain'}.yaml"
        path.write_text(gateway_config(port, redaction))
        configs[redaction] = path
    sources = {"gateway": ROOT}
    if args.baseline:
        sources["gateway-base"] = Path(args.baseline).resolve()
    rows: dict[tuple[str, bool], list[tuple[float, float, float]]] = {}
    for _ in range(args.runs):
        for target, source in sources.items():
            for redaction, config in configs.items():
                rows.setdefault((target, redaction), []).append(measure(target, workdir, config, source))
    print("| target | redaction | peak MiB | settled MiB | peak / settled | ready s |")
    print("|---|---|---:|---:|---:|---:|")
    for (target, redaction), got in rows.items():
        peak = statistics.median(r[0] for r in got)
        settled = statistics.median(r[1] for r in got)
        ready = statistics.median(r[2] for r in got)
        print(f"| {target} | {'secrets+pii' if redaction else 'off'} | {peak:.1f} | {settled:.1f} | "
              f"{peak / settled:.2f} | {ready:.2f} |")


if __name__ == "__main__":
    main()
