"""TTFT seen by an independent client (issue #34, point 4): S1's shape (8 concurrent, upstream TTFT 50 ms,
20 chunks of 8 characters 5 ms apart), direct to the fake upstream and through the gateway (redaction off
unless `--targets` names `gateway`), measured by several harnesses in the same rounds:

- `raw[:new][:split][:nagle][:procs][:idle]`: a raw-socket reader (`bench/raw_client.py`, no code shared
  with the bench's load generator); `new`: a connection per request (else keep-alive), `split`: head and
  body in two writes, `nagle`: TCP_NODELAY off in the client, `procs`: each connection its own process
  (else a thread, all of them in this process under one interpreter lock), `idle`: a second's pause
  after each request (with `--concurrency 1`, a gateway serving a request a second: each one the first
  of its second);
- `sdk[:procs][:idle]`: the official `openai` SDK's streaming, timed as its user would;
- `loadgen`: the project's own load generator (`bench.loadgen`, aiohttp), as `make bench` runs it.

Each round runs every target in turn (order reversed every other round) with every harness. Added TTFT
= the target's p50 (p90) less direct's from the same harness and round; the report gives the median of
the rounds and each round's. Per request it also reports the client's CPU and the server's CPU and
run-queue wait (`/proc/<pid>/schedstat`: woken, waiting for a core). `--rt` runs servers and clients at
SCHED_FIFO 1 (root), which takes the other processes on a shared machine out of the measurement. `--pin`
gives the relay under test (gateway, nginx, pyrelay) the last CPU to itself and runs the clients and the
fake upstream on the others, as a deployment with a CPU request of its own serves remote clients.

    python -m bench.ttft_probe --rounds 5 --harness raw,raw:new:split:nagle,sdk,loadgen
    python -m bench.ttft_probe --rounds 3 --harness raw,loadgen --targets direct,gateway-noredact,nginx --rt
    python -m bench.ttft_probe --rounds 6 --harness raw --targets direct,gateway-noredact,gateway-noredact-base \
        --baseline ../base        # an A/B: the older checkout's gateway in the same rounds
    python -m bench.ttft_probe --rounds 5 --harness raw --targets direct,gateway-noredact,gateway-noredact-base \
        --base-python ../venv-pgo/bin/python   # an A/B of two builds of the interpreter, same code
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import servers
from bench.affinity import set_process_affinity, set_tree_affinity, split_cpus
from bench.procstat import tree
from bench.raw_client import CHUNK_CHARS, CHUNKS, CONCURRENCY, GAP_MS, TTFT_MS, Habits, run_clients

IDLE_PAUSE_S = 1.0  # `idle`: with S1's ~0.15 s per request, each request of a worker in a later second


def run_loadgen(url: str, requests: int, concurrency: int = CONCURRENCY,
                ramp_s: float = 0.0) -> tuple[list[float], float]:
    """The project's own harness (`bench.loadgen`, its own process), S1's shape: TTFT samples in ms and
    the load generator's CPU seconds."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        argv = [sys.executable, "-m", "bench.loadgen", "--out", f.name, "--url", url,
                "--concurrency", str(concurrency), "--requests", str(requests), "--ramp-s", str(ramp_s),
                "--ttft-ms", str(TTFT_MS), "--chunks", str(CHUNKS), "--chunk-chars", str(CHUNK_CHARS),
                "--gap-ms", str(GAP_MS)]
        subprocess.run(argv, check=True, cwd=servers.ROOT, capture_output=True)
        result = json.loads(Path(f.name).read_bytes())
        return [s * 1000 for s in result["ttft_s"]], float(result["cpu_s"])


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def habits_of(spec: str) -> tuple[str, Habits]:
    """`raw`, `raw:new`, `raw:new:split:nagle`, `raw:procs`, `raw:idle`, `sdk`, `sdk:procs`, `loadgen`: a
    client and its habits."""
    kind, *flags = spec.split(":")
    unknown = set(flags) - {"new", "split", "nagle", "procs", "idle"}
    if kind not in ("raw", "sdk", "loadgen") or unknown or (kind == "loadgen" and flags):
        raise SystemExit(f"unknown harness {spec!r}")
    return kind, Habits(new_conn="new" in flags, nodelay="nagle" not in flags, split="split" in flags,
                        procs="procs" in flags, pause_s=IDLE_PAUSE_S if "idle" in flags else 0.0)


@dataclass(slots=True)
class Round:
    """One harness on one target for one round: the TTFT samples, and what the processes spent per
    request: the client's CPU, the server's CPU and the server's run-queue wait (`/proc/<pid>/schedstat`:
    time runnable but not running, i.e. woken and waiting for a core)."""

    ttft_ms: list[float]
    client_cpu_ms: float = 0.0
    server_cpu_ms: float = 0.0
    server_wait_ms: float = 0.0
    server_wakeups: float = 0.0


def sched(pid: int) -> tuple[float, float, int]:
    """(CPU s, run-queue wait s, times scheduled in) of a process, its children (nginx's worker) and all
    their threads."""
    cpu = wait = 0.0
    slices = 0
    tasks = [t for p in tree(pid) if Path(f"/proc/{p}/task").exists() for t in Path(f"/proc/{p}/task").iterdir()]
    for task in tasks:
        try:
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            _, delay, n = (task / "schedstat").read_text().split()
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
        cpu += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        wait, slices = wait + int(delay) / 1e9, slices + int(n)
    return cpu, wait, slices


def measure(spec: str, url: str, requests: int, concurrency: int, ramp_s: float, server_pid: int) -> Round:
    kind, habits = habits_of(spec)
    before, cpu0 = sched(server_pid), _self_cpu()
    if kind == "loadgen":
        ttft, client_cpu = run_loadgen(url, requests, concurrency, ramp_s)
    else:
        got = run_clients(kind, url, habits, requests, concurrency, ramp_s)
        if got.errors:
            print(f"  {spec} {url}: {got.errors} errors", file=sys.stderr)
        ttft, client_cpu = got.ttft_ms, got.cpu_s if habits.procs else _self_cpu() - cpu0
    after = sched(server_pid)
    n = max(1, len(ttft))
    return Round(ttft, client_cpu * 1000 / n, (after[0] - before[0]) * 1000 / n, (after[1] - before[1]) * 1000 / n,
                 (after[2] - before[2]) / n)


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # this process's client threads, not the servers (children)
    return r.ru_utime + r.ru_stime


GATEWAYS = ("gateway", "gateway-noredact")
BASE = "-base"  # a gateway target with this suffix runs the --baseline checkout's code, or --base-python
KNOWN = frozenset({*GATEWAYS, *(g + BASE for g in GATEWAYS), "nginx", "pyrelay"})


def check_targets(targets: list[str], baseline: Path | None, base_python: str | None = None) -> list[str]:
    """The targets that run the `baseline` checkout or the `base_python` interpreter. Refused before anything
    starts: an unknown target, or a `-base` one with neither."""
    if not targets or targets[0] != "direct":
        raise SystemExit("--targets must start with direct (the baseline)")
    unknown = [t for t in targets[1:] if t not in KNOWN]
    if unknown:
        raise SystemExit(f"unknown targets {unknown}")
    based = [t for t in targets if t.endswith(BASE)]
    if based and baseline is None and base_python is None:
        raise SystemExit(f"{based} run another checkout or interpreter: give --baseline or --base-python")
    return based


def start_targets(workdir: Path, targets: list[str], lag: bool, baseline: Path | None = None,
                  base_python: str | None = None, sched_slice_us: int = 0) -> dict[str, servers.Server]:
    """The fake upstream (target `direct`, started first) and the other targets, by name. A gateway target
    named `...-base` runs the `baseline` checkout's code and/or under `base_python` (an A/B in the same
    rounds); the clients and the fake upstream run under this interpreter whatever the target.
    `sched_slice_us`: `server.sched_slice_us` of the gateway targets that are not `-base`."""
    upstream = servers.start_upstream(workdir)
    started = {"direct": upstream}
    try:
        for target in targets:
            if target == "nginx":  # the floor of two more hops: a plain relay (bench/README.md)
                started[target] = servers.start_nginx(workdir, upstream.port, servers.ensure_nginx())
            elif target == "pyrelay":  # the floor of a Python process in the path: bytes through uvloop
                started[target] = servers.start_pyrelay(workdir, upstream.port)
            elif target != "direct":
                config = workdir / f"{target}.yaml"
                redaction = target.removesuffix(BASE) == "gateway"
                based = target.endswith(BASE)
                config.write_text(servers.gateway_config(upstream.port, redaction=redaction,
                                                         sched_slice_us=0 if based else sched_slice_us))
                source = baseline if baseline is not None and based else servers.ROOT
                python = base_python if base_python is not None and based else sys.executable
                started[target] = servers.start_gateway(target, workdir, config, source=source,
                                                        lag=workdir / f"lag-{target}" if lag else None, python=python)
    except BaseException:
        stop_all(started)
        raise
    return started


def realtime(pids: list[int]) -> None:
    """SCHED_FIFO 1 for these processes (all their threads and children) and for this one, whose client
    threads and load generator inherit it. The kernel's RT throttling still leaves others 5% of a core."""
    for pid in [p for root in pids for p in tree(root)]:  # nginx's worker is the master's child
        subprocess.run(["chrt", "-a", "-f", "-p", "1", str(pid)], check=True, capture_output=True)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))


def pin(started: dict[str, servers.Server]) -> None:
    """Every thread of the relays under test (their children too: nginx's worker) on the relay's CPU, the
    fake upstream's and this process's on the others. Threads and processes made later inherit the
    affinity of the thread that makes them: this one's client threads and load generator included."""
    relay, rest = split_cpus(os.sched_getaffinity(0))
    for name, server in started.items():
        set_tree_affinity(server.pid, rest if name == "direct" else relay)
    set_process_affinity(os.getpid(), rest)


def stop_all(started: dict[str, servers.Server]) -> None:
    for server in reversed(list(started.values())):
        server.stop()


def report(results: dict[tuple[str, str], list[Round]], harnesses: list[str], targets: list[str]) -> str:
    """Per harness and target: TTFT p50/p90 over all rounds; the added p50/p90 over direct (each round's
    difference, then their median, and each round's); per request the client's CPU, the server's CPU and
    its run-queue wait (direct's server is the fake upstream)."""
    lines = ["| harness | target | n | TTFT p50 ms | TTFT p90 ms | added p50 ms: median (rounds) | added p90 ms "
             "| client CPU ms/req | server CPU ms/req | server run-queue wait ms/req | server wake-ups/req |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for h in harnesses:
        direct = results[(h, "direct")]
        for t in targets:
            rounds = results[(h, t)]
            flat = [x for r in rounds for x in r.ttft_ms]
            add50 = [pct(r.ttft_ms, .5) - pct(d.ttft_ms, .5) for r, d in zip(rounds, direct, strict=True)]
            add90 = [pct(r.ttft_ms, .9) - pct(d.ttft_ms, .9) for r, d in zip(rounds, direct, strict=True)]
            added = "0" if t == "direct" else \
                f"**{statistics.median(add50):.2f}** ({', '.join(f'{a:.2f}' for a in add50)})"
            costs = [statistics.median(getattr(r, f) for r in rounds)
                     for f in ("client_cpu_ms", "server_cpu_ms", "server_wait_ms", "server_wakeups")]
            lines.append(f"| {h} | {t} | {len(flat)} | {pct(flat, .5):.2f} | {pct(flat, .9):.2f} | {added} | "
                         f"{0 if t == 'direct' else statistics.median(add90):.2f} | "
                         + " | ".join(f"{c:.2f}" for c in costs) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="S1's TTFT by clients independent of bench/loadgen.py")
    p.add_argument("--harness", default="raw,raw:new:split:nagle,sdk,loadgen",
                   help="comma-separated: raw[:new][:split][:nagle][:procs][:idle], sdk[:procs][:idle], loadgen")
    p.add_argument("--targets", default="direct,gateway-noredact",
                   help="direct, gateway-noredact (redaction off), gateway (secrets+pii), nginx, pyrelay "
                        "(bench.pyrelay: bytes through a uvloop process); a gateway target ending in `-base` "
                        "runs --baseline's code")
    p.add_argument("--baseline", type=Path, help="another checkout (a `git worktree` of an older commit) for the "
                   "`-base` targets")
    p.add_argument("--base-python", help="the interpreter of the `-base` targets (with --baseline or without: "
                   "this checkout), e.g. a venv of another build of Python holding the gateway's dependencies")
    p.add_argument("--sched-slice-us", type=int, default=0, help="server.sched_slice_us of the gateway targets "
                   "that do not end in `-base` (with `-base` targets of this checkout: an A/B of the setting)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=200, help="per harness, target and round")
    p.add_argument("--warmup", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=CONCURRENCY)
    p.add_argument("--ramp-ms", type=float, default=0.0,
                   help="start the workers spread over this long (e.g. 150: S1's request time), not all at once")
    p.add_argument("--lag", action="store_true", help="run the gateways under bench/loop_lag.py, as bench.run does")
    p.add_argument("--rt", action="store_true",
                   help="run servers and clients at SCHED_FIFO priority 1 (root): other processes on the machine "
                        "no longer delay their wake-ups, which shows what a run-queue wait adds")
    p.add_argument("--pin", action="store_true",
                   help="the relay under test (gateway, nginx, pyrelay) on a CPU of its own, the clients and the "
                        "fake upstream on the others: no target waits behind the load for a core")
    args = p.parse_args(argv)
    harnesses, targets = args.harness.split(","), args.targets.split(",")
    check_targets(targets, args.baseline, args.base_python)
    for h in harnesses:
        habits_of(h)
    results: dict[tuple[str, str], list[Round]] = {(h, t): [] for h in harnesses for t in targets}
    with tempfile.TemporaryDirectory(prefix="ttft-probe-") as tmp:
        started = start_targets(Path(tmp), targets, args.lag, args.baseline, args.base_python,
                                args.sched_slice_us)
        try:
            if args.rt:
                realtime([s.pid for s in started.values()])
            if args.pin:
                pin(started)
            def one(h: str, t: str, n: int) -> Round:
                return measure(h, started[t].url, n, args.concurrency, args.ramp_ms / 1000, started[t].pid)

            for t in targets:
                for h in harnesses:
                    one(h, t, args.warmup)
            for r in range(args.rounds):
                for t in (targets if r % 2 == 0 else targets[::-1]):
                    for h in harnesses:
                        results[(h, t)].append(one(h, t, args.requests))
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            stop_all(started)
    print(report(results, harnesses, targets))


if __name__ == "__main__":
    main()
