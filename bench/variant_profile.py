"""Where a variant's extra cost goes: each variant of a comparison (bench/variants.py) under cProfile with
the same S2 load, and the functions whose calls or own time per request differ, largest first.

Call counts per request are exact (the same requests run through both) and rank the list; own times are
the loop thread's CPU time as cProfile splits it, which inflates call-heavy Python code and still moves
with the machine's load, so read them as a hint. Start-up and the warm-up are in both profiles
alike and divide out.

    python -m bench.variant_profile --auth jwt [--requests 2000] [--top 20]
    python -m bench.variant_profile --routing latency
    python -m bench.variant_profile --state cluster
"""

from __future__ import annotations

import argparse
import pstats
import signal
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench import servers, variants
from bench.instructions import _checked
from bench.run import loadgen, raise_nofile
from bench.scenarios import FULL, Scenario

# the gateway under cProfile timed by the loop thread's CPU time (wall time would count the machine's
# other load), the profile written when it exits on SIGINT
_LAUNCH = """import cProfile, runpy, sys, time
out = sys.argv[1]
sys.argv = ["gateway", *sys.argv[2:]]
prof = cProfile.Profile(time.thread_time)
prof.enable()
try:
    runpy.run_module("gateway", run_name="__main__", alter_sys=True)
except (SystemExit, KeyboardInterrupt):
    pass
finally:
    prof.disable()
    prof.dump_stats(out)
"""
Func = tuple[str, int, str]
Figures = dict[Func, tuple[int, float]]  # function -> (calls, own seconds)


def profile(v: variants.Variant, sc: Scenario, requests: int, signer: variants.Signer,
            states: variants.StateServers) -> Figures:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-vprof-"))
    upstream = servers.start_upstream(workdir, jwks=variants.write_jwks(signer, workdir))
    config = workdir / "gateway.yaml"
    base = servers.gateway_config(upstream.port, not servers.redaction_missing())
    config.write_text(variants.config_text(base, v, upstream.port, states.url(v.state)))
    out, port = workdir / "gateway.prof", servers.free_port()
    argv = [sys.executable, "-c", _LAUNCH, str(out), "serve", "--config", str(config),
            "--port", str(port), "--metrics-port", str(servers.free_port())]
    gw = servers.spawn("gateway", argv, workdir, port)
    try:
        gw.wait_ready("/healthz", timeout_s=60)
        _checked(loadgen(gw.url, sc, requests=requests, duration_s=0, samples=False, bearer=variants.bearer(v, signer)))
    finally:
        gw.proc.send_signal(signal.SIGINT)  # a clean exit, so cProfile writes its file
        gw.proc.wait(timeout=60)
        upstream.stop()
    stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    return {f: (int(row[1]), float(row[2])) for f, row in stats.items()}


def differences(this: Figures, ref: Figures, requests: int, top: int) -> list[str]:
    """The functions whose calls per request differ most (then own time), as lines to print."""
    rows = []
    for f in this.keys() | ref.keys():
        (c1, t1), (c0, t0) = this.get(f, (0, 0.0)), ref.get(f, (0, 0.0))
        rows.append(((t1 - t0) / requests * 1e6, (c1 - c0) / requests, f))
    rows.sort(key=lambda r: (-abs(round(r[1], 2)), -abs(r[0])))
    out = []
    for dt_us, dcalls, (file, line, name) in rows[:top]:
        where = f"{Path(file).name}:{line}({name})" if line else name
        out.append(f"  {dt_us:+7.2f} µs  {dcalls:+7.2f} calls  {where}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.variant_profile", description=__doc__.splitlines()[0])
    p.add_argument("--auth", choices=("jwt",))
    p.add_argument("--routing", help="comma-separated policies (latency, weighted), each against ordered")
    p.add_argument("--state", choices=("cluster",))
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--top", type=int, default=20)
    args = p.parse_args(argv)
    raise_nofile()
    pairs = variants.comparisons(args.auth, args.routing, args.state)
    if not pairs:
        p.error("give one of --auth, --routing, --state")
    sc = replace(next(s for s in FULL if s.key == "S2"), concurrency=args.concurrency)
    signer, states = variants.Signer.new(), variants.StateServers()
    try:
        for this, ref in pairs:
            figs = [profile(v, sc, args.requests, signer, states) for v in (this, ref)]
            total = [sum(t for _c, t in f.values()) / args.requests * 1e6 for f in figs]
            print(f"{this.name} vs {ref.name}: {total[0]:.0f} vs {total[1]:.0f} µs/request under cProfile "
                  f"({total[0] / total[1] - 1:+.1%}); own time and calls per request, {this.name} minus {ref.name}:")
            print("\n".join(differences(figs[0], figs[1], args.requests, args.top)), flush=True)
    finally:
        states.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
