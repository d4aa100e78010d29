"""Instructions per request, this checkout beside a baseline: a CPU measure the machine's noise cannot move.

CPU seconds per request drift by 5-20% between runs of the same code on a shared or virtual machine
(other processes, frequency, cache neighbours), which hides a change of a few percent. This runs each
gateway under valgrind's callgrind with instrumentation off until it is warm (imports, pools, compiled
rules), counts the user-space instructions (`Ir`) of exactly N requests of a scenario's shape, and divides.
The count does not see system-call time or cache misses (compare syscalls per request with
`strace -c -p PID` when they may differ), and under callgrind the gateway is ~50x slower, so its reads
coalesce more than at full speed: read the ratio between targets, not the absolute figure.

    python -m bench.instructions --baseline ../base [--scenario S2] [--requests 1000] [--concurrency 32]
    python -m bench.instructions --store   # this checkout with the SQLite store on ("this") and without
    python -m bench.instructions --genai   # this checkout with the GenAI metrics ("this") and without

Needs valgrind (`apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench import servers
from bench.run import loadgen, raise_nofile
from bench.scenarios import FULL, Scenario

WARMUP = 200
_TOTALS = re.compile(rb"^totals:\s*(\d+)", re.M)


def instructions_per_request(source: Path, sc: Scenario, requests: int, store: bool = False,
                             genai: bool = True) -> float:
    """`store`: with the control plane's SQLite store on (a spend row per request); `genai`: with the GenAI
    convention metrics (docs/observability.md), the default."""
    workdir = Path(tempfile.mkdtemp(prefix="gateway-ir-"))
    upstream = servers.start_upstream(workdir)
    config = workdir / "gateway.yaml"
    store_url = f"sqlite:///{workdir}/store.db" if store else None
    config.write_text(servers.gateway_config(upstream.port, not servers.redaction_missing(), store_url=store_url)
                      + ("" if genai else "telemetry: {genai_metrics: false}\n"))
    port = servers.free_port()
    out = workdir / "callgrind.out"
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port),
            "--metrics-port", str(servers.free_port())]
    gw = servers.spawn("gateway-callgrind", argv, workdir, port, cwd=source)
    try:
        gw.wait_ready("/healthz", timeout_s=300)  # under callgrind the start takes a minute
        url = gw.url_for(sc.api)
        loadgen(url, sc, requests=WARMUP, duration_s=0, samples=False)
        control = shutil.which("callgrind_control") or "callgrind_control"
        subprocess.run([control, "-i", "on", str(gw.proc.pid)], capture_output=True, check=True)
        loadgen(url, sc, requests=requests, duration_s=0, samples=False)
        subprocess.run([control, "-i", "off", str(gw.proc.pid)], capture_output=True, check=True)
        subprocess.run([control, "-d", str(gw.proc.pid)], capture_output=True, check=True)
    finally:
        gw.proc.send_signal(signal.SIGTERM)
        gw.proc.wait(timeout=120)
        upstream.stop()
    total = sum(int(m.group(1)) for f in workdir.glob("callgrind.out*")
                if (m := _TOTALS.search(f.read_bytes())) is not None)
    shutil.rmtree(workdir, ignore_errors=True)
    return total / requests


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="another checkout (a `git worktree` of the previous main)")
    p.add_argument("--store", action="store_true", help="compare this checkout with the SQLite store on against "
                   "itself without one, instead of against --baseline")
    p.add_argument("--genai", action="store_true", help="compare this checkout with the GenAI metrics against "
                   "itself without them, instead of against --baseline")
    p.add_argument("--this", help="the checkout to measure (default: this one)")
    p.add_argument("--scenario", default="S2", help="comma-separated scenario keys (their shape, not their load)")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=32, help="concurrent streams (callgrind is ~50x slower)")
    p.add_argument("--repeat", type=int, default=2, help="runs per target, alternated")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    raise_nofile()
    here = Path(args.this).resolve() if args.this else Path(__file__).resolve().parent.parent
    if (args.store or args.genai) == (args.baseline is not None) or (args.store and args.genai):
        p.error("give one of --baseline DIR, --store, --genai")
    base = here if args.store or args.genai else Path(args.baseline).resolve()
    for key in args.scenario.split(","):
        sc = replace(next(s for s in FULL if s.key == key), concurrency=args.concurrency)
        figures: dict[str, list[float]] = {"this": [], "baseline": []}
        for r in range(args.repeat):
            order = [("this", here), ("baseline", base)]
            for name, source in order if r % 2 == 0 else order[::-1]:
                figures[name].append(instructions_per_request(source, sc, args.requests,
                                                              store=args.store and name == "this",
                                                              genai=not (args.genai and name == "baseline")))
        this, baseline = min(figures["this"]), min(figures["baseline"])
        runs = "; ".join(f"{n}: " + ", ".join(f"{v:,.0f}" for v in vs) for n, vs in figures.items())
        print(f"{key}: {this:,.0f} vs {baseline:,.0f} instructions/request ({this / baseline - 1:+.1%})  [{runs}]",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
