"""Profile the gateway under a benchmark scenario's load: where its CPU goes, function by function.

Starts the fake upstream and one gateway (redaction as in `bench.run`), warms it up, then samples it
with py-spy (non-blocking, so the sampling doesn't slow the loop it measures) while the load generator
runs the scenario. Prints the top functions by own time and by inclusive time. `--svg` writes a flame
graph instead (kept out of git by .gitignore). Without py-spy (`pip install py-spy`), the gateway is
run under cProfile and its hottest functions are printed from that.

    python -m bench.profile --scenario S2 [--seconds 10] [--top 25] [--noredact] [--native] [--svg FILE] [--store [URL]]
"""

from __future__ import annotations

import argparse
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench import servers
from bench.run import loadgen, raise_nofile
from bench.scenarios import FULL, Scenario


def _start_gateway(workdir: Path, upstream_port: int, redaction: bool, cprofile: Path | None,
                   otlp_endpoint: str | None = None, store_url: str | None = None) -> servers.Server:
    config = workdir / "gateway.yaml"
    config.write_text(servers.gateway_config(upstream_port, redaction, otlp_endpoint, store_url))
    if cprofile is None:
        return servers.start_gateway("gateway", workdir, config)
    port = servers.free_port()
    argv = [sys.executable, "-m", "cProfile", "-o", str(cprofile), "-m", "gateway", "serve", "--config",
            str(config), "--port", str(port), "--metrics-port", str(servers.free_port())]
    server = servers.spawn("gateway", argv, workdir, port)
    server.wait_ready("/healthz")
    return server


def top_from_raw(raw: str, n: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """py-spy's collapsed stacks ("frame;frame;frame count") -> (by own samples, by inclusive, total)."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        frames = [f for f in stack.split(";") if "(" in f]  # drop the process/thread header frames
        if not frames:
            continue
        total += k
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    return own.most_common(n), incl.most_common(n), total


def _print_top(title: str, rows: list[tuple[str, int]], total: int) -> None:
    print(f"\n{title} ({total} samples)")
    for frame, k in rows:
        print(f"  {100 * k / total:5.1f}%  {frame}")


def _print_callers(raw: str, leaf: str, top: int) -> None:
    paths: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        frames = stack.split(";")
        if leaf in frames[-1]:
            paths[" <- ".join(reversed(frames[-6:]))] += int(count)
    print(f"paths into {leaf!r}: {sum(paths.values())} of {total} samples")
    for path, k in paths.most_common(top):
        print(f"  {100 * k / max(total, 1):5.2f}%  {path}")


def _pyspy(pid: int, seconds: float, out: Path, svg: bool, native: bool) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [spy, "record", "--pid", str(pid), "--rate", "250", "--function", "--duration", str(int(seconds)),
            "--format", "flamegraph" if svg else "raw", "--output", str(out)]
    # --native has to stop the process to unwind C stacks; otherwise sample without pausing it
    argv += ["--native"] if native else ["--nonblocking"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _load_in_background(url: str, sc: Scenario, seconds: float) -> threading.Thread:
    shaped = replace(sc, duration_s=seconds, requests=0)
    t = threading.Thread(target=loadgen, args=(url, shaped), kwargs={"requests": 0, "duration_s": seconds,
                                                                    "samples": False})
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="S2", choices=[s.key for s in FULL])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--noredact", action="store_true", help="profile with redaction off")
    p.add_argument("--svg", help="write a py-spy flame graph here instead of printing tables")
    p.add_argument("--native", action="store_true", help="include C frames (orjson, GC, syscalls)")
    p.add_argument("--callers", help="instead of the tables: the call paths (last frames) into leaf frames "
                   "whose name contains this, e.g. getpid")
    p.add_argument("--chunks", type=int, help="override the scenario's chunks per answer (1: per-request cost)")
    p.add_argument("--raw", help="also keep py-spy's collapsed stacks in this file")
    p.add_argument("--tracing", action="store_true", help="every request traced, spans exported to bench/otlp_sink")
    p.add_argument("--store", nargs="?", const="sqlite", help="the control plane's store on (a spend row per "
                   "request): a postgresql:// URL, or a SQLite file in the temp dir when given without one")
    args = p.parse_args(argv)
    raise_nofile()
    sc = next(s for s in FULL if s.key == args.scenario)
    if args.chunks:
        sc = replace(sc, chunks=args.chunks)
    has_spy = bool(shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").exists())
    workdir = Path(tempfile.mkdtemp(prefix="gateway-profile-"))
    upstream = servers.start_upstream(workdir)
    redaction = not args.noredact and not servers.redaction_missing()
    prof = None if has_spy else workdir / "gateway.prof"
    sink = servers.start_otlp_sink(workdir) if args.tracing else None
    store_url = None if not args.store else f"sqlite:///{workdir}/store.db" if args.store == "sqlite" else args.store
    gw = _start_gateway(workdir, upstream.port, redaction, prof, f"http://127.0.0.1:{sink.port}" if sink else None,
                        store_url)
    try:
        loadgen(gw.url, sc, requests=sc.warmup, duration_s=0, samples=False)
        out = Path(args.svg) if args.svg else Path(args.raw) if args.raw else workdir / "profile.txt"
        spy = _pyspy(gw.pid, args.seconds, out, bool(args.svg), args.native) if has_spy else None
        _load_in_background(gw.url, sc, args.seconds + 1).join()
        if spy is not None:
            _, err = spy.communicate(timeout=60)
            if spy.returncode != 0:
                raise RuntimeError(f"py-spy failed: {err.decode()[-1000:]}")
    finally:
        if prof is not None:
            gw.proc.send_signal(signal.SIGINT)  # a clean exit, so cProfile writes its file
        gw.stop()
        upstream.stop()
        if sink is not None:
            sink.stop()
    print(f"{sc.key}: {sc.title}; {sc.chunks} chunks; redaction {'on' if redaction else 'off'}"
          f"{'; traced' if sink else ''}{'; store ' + args.store if args.store else ''}")
    if prof is not None:
        pstats.Stats(str(prof)).sort_stats("tottime").print_stats(args.top)
    elif args.svg:
        print(f"flame graph: {args.svg}")
    elif args.callers:
        _print_callers(out.read_text(), args.callers, args.top)
    else:
        own, incl, total = top_from_raw(out.read_text(), args.top)
        _print_top("own time (leaf frame)", own, total)
        _print_top("inclusive time", incl, total)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
