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
    python -m bench.instructions --auth jwt                   # IdP token vs gateway key (#58)
    python -m bench.instructions --routing latency,weighted   # each policy vs `ordered` (#59)
    python -m bench.instructions --state cluster              # Redis Cluster vs one redis-server (#61)

The last three compare variants of this checkout's S2 gateway (bench/variants.py): the same config but
for what the option names. With `--state`, Redis's own instructions are not counted (it is not under
callgrind); the commands it processed per request are printed, to show it was used.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import servers, variants
from bench.run import loadgen, raise_nofile
from bench.scenarios import FULL, Scenario

WARMUP = 200
KEEP = {"dir": ""}  # `--keep DIR`: where the variants' callgrind files are copied
_TOTALS = re.compile(rb"^totals:\s*(\d+)", re.M)


@dataclass(frozen=True, slots=True)
class VariantRun:
    """A bench/variants.py variant to measure: the variant, the run's signer, the Redis servers it may need."""

    variant: variants.Variant
    signer: variants.Signer
    states: variants.StateServers


def instructions_per_request(source: Path, sc: Scenario, requests: int, store: bool = False,
                             genai: bool = True, variant: VariantRun | None = None) -> float:
    """`store`: with the control plane's SQLite store on (a spend row per request); `genai`: with the GenAI
    convention metrics (docs/observability.md), the default; `variant`: a variant of the S2 gateway."""
    workdir = Path(tempfile.mkdtemp(prefix="gateway-ir-"))
    jwks = variants.write_jwks(variant.signer, workdir) if variant else None
    upstream = servers.start_upstream(workdir, jwks=jwks)
    config = workdir / "gateway.yaml"
    store_url = f"sqlite:///{workdir}/store.db" if store else None
    text = (servers.gateway_config(upstream.port, not servers.redaction_missing(), store_url=store_url)
            + ("" if genai else "telemetry: {genai_metrics: false}\n"))
    bearer = ""
    if variant is not None:
        v = variant.variant
        text = variants.config_text(text, v, upstream.port, variant.states.url(v.state))
        bearer = variants.bearer(v, variant.signer)
    config.write_text(text)
    port = servers.free_port()
    out = workdir / "callgrind.out"
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port),
            "--metrics-port", str(servers.free_port())]
    gw = servers.spawn("gateway-callgrind", argv, workdir, port, cwd=source)
    try:
        gw.wait_ready("/healthz", timeout_s=300)  # under callgrind the start takes a minute
        url = gw.url_for(sc.api)
        _checked(loadgen(url, sc, requests=WARMUP, duration_s=0, samples=False, bearer=bearer))
        control = shutil.which("callgrind_control") or "callgrind_control"
        state = variant.variant.state if variant else "memory"
        commands = variant.states.commands(state) if variant else 0
        io = _io_calls(gw.proc.pid)
        subprocess.run([control, "-i", "on", str(gw.proc.pid)], capture_output=True, check=True)
        _checked(loadgen(url, sc, requests=requests, duration_s=0, samples=False, bearer=bearer))
        if variant is not None:  # what callgrind does not count: system calls (and Redis's own work)
            calls = (_io_calls(gw.proc.pid) - io) / requests
            used = (variant.states.commands(state) - commands) / requests
            print(f"  {variant.variant.name}: {calls:.1f} read+write system calls per request"
                  + (f", {used:.1f} Redis commands per request" if state != "memory" else ""), flush=True)
        subprocess.run([control, "-i", "off", str(gw.proc.pid)], capture_output=True, check=True)
        subprocess.run([control, "-d", str(gw.proc.pid)], capture_output=True, check=True)
    finally:
        gw.proc.send_signal(signal.SIGTERM)
        gw.proc.wait(timeout=120)
        upstream.stop()
    total = sum(int(m.group(1)) for f in workdir.glob("callgrind.out*")
                if (m := _TOTALS.search(f.read_bytes())) is not None)
    if KEEP["dir"] and variant is not None:  # `--keep`: the profile, for callgrind_annotate
        for f in workdir.glob("callgrind.out*"):
            shutil.copyfile(f, Path(KEEP["dir"]) / f"{variant.variant.name}.{f.name}")
    shutil.rmtree(workdir, ignore_errors=True)
    return total / requests


def _io_calls(pid: int) -> int:
    """The read- and write-like system calls a process has made (/proc/PID/io: syscr + syscw)."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["syscr"]) + int(fields["syscw"])


def _checked(result: dict[str, Any]) -> None:
    """A count over refused or failed requests would measure the wrong path."""
    if result.get("errors"):
        raise RuntimeError(f"requests failed: {result['errors']} {result.get('error_samples')}")


def compare_variants(here: Path, sc: Scenario, pairs: list[list[variants.Variant]], requests: int,
                     repeat: int) -> None:
    """Each [variant, reference] of `pairs` on this checkout, alternated, printed as a ratio."""
    signer, states = variants.Signer.new(), variants.StateServers()
    try:
        for pair in pairs:
            figures: dict[str, list[float]] = {v.name: [] for v in pair}
            for r in range(repeat):
                for v in pair if r % 2 == 0 else pair[::-1]:
                    figures[v.name].append(instructions_per_request(here, sc, requests,
                                                                    variant=VariantRun(v, signer, states)))
            this, ref = (min(figures[v.name]) for v in pair)
            runs = "; ".join(f"{n}: " + ", ".join(f"{x:,.0f}" for x in xs) for n, xs in figures.items())
            print(f"{sc.key} {pair[0].name} vs {pair[1].name}: {this:,.0f} vs {ref:,.0f} instructions/request "
                  f"({this / ref - 1:+.2%})  [{runs}]", flush=True)
    finally:
        states.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="another checkout (a `git worktree` of the previous main)")
    p.add_argument("--store", action="store_true", help="compare this checkout with the SQLite store on against "
                   "itself without one, instead of against --baseline")
    p.add_argument("--genai", action="store_true", help="compare this checkout with the GenAI metrics against "
                   "itself without them, instead of against --baseline")
    p.add_argument("--auth", choices=("jwt",), help="an IdP token against a gateway key (#58)")
    p.add_argument("--routing", help="comma-separated policies (latency, weighted), each against ordered (#59)")
    p.add_argument("--state", choices=("cluster",), help="Redis Cluster state against one redis-server (#61)")
    p.add_argument("--keep", help="with --auth/--routing/--state: copy each variant's callgrind file here")
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
    pairs = variants.comparisons(args.auth, args.routing, args.state)
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        KEEP["dir"] = str(Path(args.keep).resolve())
    if pairs:
        for key in args.scenario.split(","):
            sc = replace(next(s for s in FULL if s.key == key), concurrency=args.concurrency)
            compare_variants(here, sc, pairs, args.requests, args.repeat)
        return 0
    if (args.store or args.genai) == (args.baseline is not None) or (args.store and args.genai):
        p.error("give one of --baseline DIR, --store, --genai, --auth, --routing, --state")
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
