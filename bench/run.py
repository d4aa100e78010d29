"""`make bench`: the gateway side by side with a plain nginx relay, in one run (issue "Performance").

One fake upstream serves every target. Per scenario, each target gets a warm-up, then measured rounds,
targets alternating (order reversed every other round, so a drift in the machine's load hits them
alike). Around each round the server's process tree's CPU time and memory are read from /proc; the load
generator runs in its own process. Results go to bench/results/ (markdown and JSON) and stdout.

    python -m bench.run [--quick] [--only S1,S2] [--streams N] [--out DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench import hostile, loop_lag, servers, variants
from bench.affinity import set_process_affinity, set_tree_affinity, split_cpus
from bench.procstat import usage
from bench.report import Measure, markdown, summarize, verdicts
from bench.scenarios import Scenario, select
from bench.servers import Server


def raise_nofile() -> int:
    """S4 holds thousands of sockets in each process; children inherit the raised limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Pool:
    """The servers of a run, started on first use; `fresh` restarts one for a memory measurement."""

    def __init__(self, workdir: Path, baseline: Path | None = None, tracing: bool = False,
                 store_url: str | None = None, ledger_journal: str | None = None, sched_slice_us: int = 0,
                 pin: bool = False, with_variants: bool = False) -> None:
        self.workdir, self.baseline, self.slice_us = workdir, baseline, sched_slice_us
        self.nginx_bin = servers.ensure_nginx()
        # `--pin`: this process first, so the fake upstream, the sink and every load generator inherit the
        # clients' CPUs; each relay is moved to its own CPU when it starts (bench/affinity.py)
        self.relay_cpus: set[int] | None = None
        if pin:
            self.relay_cpus, rest = split_cpus(os.sched_getaffinity(0))
            set_process_affinity(os.getpid(), rest)
        # `--variants`: bench/variants.py's targets, with the IdP keys the upstream serves and their Redis
        self.signer = variants.Signer.new() if with_variants else None
        self.states = variants.StateServers()
        self.bearers: dict[str, str] = {}
        jwks = variants.write_jwks(self.signer, workdir) if self.signer else None
        self.upstream = servers.start_upstream(workdir, jwks=jwks)
        self.sink = servers.start_otlp_sink(workdir) if tracing else None
        self.running: dict[str, Server] = {}
        plain = self._write_config(False)
        problem = servers.check_config(plain)
        if problem:
            raise RuntimeError(f"gateway rejects the bench config {plain}: {problem}")
        # redaction on where the gateway can do it; else measured off, and the report says why
        self.redaction_off_because = servers.redaction_missing()
        redact = plain
        if not self.redaction_off_because:
            redact = self._write_config(True)
            problem = servers.check_config(redact)
            if problem:
                self.redaction_off_because, redact = f"the redaction config is rejected: {problem}", plain
        self.configs = {True: redact, False: plain}
        self.traced: dict[str, Path] = {}
        if self.sink is not None:  # a collector that answers, and one that is down (nothing listens)
            for target, endpoint in (("gateway-traced", f"http://127.0.0.1:{self.sink.port}"),
                                     ("gateway-traced-down", f"http://127.0.0.1:{servers.free_port()}")):
                path = workdir / f"{target}.yaml"
                path.write_text(self._config_text(redact != plain, otlp_endpoint=endpoint))
                self.traced[target] = path
        path = workdir / "gateway-faults.yaml"  # S2f: a first deployment that starts failing mid-run
        path.write_text(self._config_text(redact != plain, faults=True))
        self.traced["gateway-faults"] = path
        if store_url is not None:  # the control plane on: a spend row per request, group-committed
            path = workdir / "gateway-store.yaml"
            path.write_text(self._config_text(redact != plain, store_url=store_url, ledger_journal=ledger_journal))
            self.traced["gateway-store"] = path
        if self.signer is not None:
            self._write_variants(redact != plain, self.signer)

    def _write_variants(self, redaction: bool, signer: variants.Signer) -> None:
        for target, v in variants.TARGETS.items():
            path = self.workdir / f"{target}.yaml"
            path.write_text(variants.config_text(self._config_text(redaction), v, self.upstream.port,
                                                 self.states.url(v.state)))
            self.traced[target] = path
            self.bearers[target] = variants.bearer(v, signer)

    def bearer(self, target: str) -> str:
        """The credential a target's load sends ('' for the targets without auth)."""
        return self.bearers.get(target, "")

    def _write_config(self, redaction: bool) -> Path:
        path = self.workdir / ("gateway-redact.yaml" if redaction else "gateway-plain.yaml")
        path.write_text(self._config_text(redaction))
        return path

    def _config_text(self, redaction: bool, **extra: Any) -> str:
        """A gateway target's config: the fake upstream, `--sched-slice-us`, and what the target adds."""
        return servers.gateway_config(self.upstream.port, redaction, sched_slice_us=self.slice_us, **extra)

    def get(self, target: str, fresh: bool = False) -> Server:
        if target == "direct":
            return self.upstream
        if fresh and target in self.running:
            self.running.pop(target).stop()
        if target not in self.running:
            self.running[target] = self._start(target)
        return self.running[target]

    def _start(self, target: str) -> Server:
        server = self._spawn(target)
        if self.relay_cpus is not None:
            set_tree_affinity(server.pid, self.relay_cpus)
        return server

    def _spawn(self, target: str) -> Server:
        if target == "nginx":
            return servers.start_nginx(self.workdir, self.upstream.port, self.nginx_bin)
        lag = self.lag_prefix(target)
        if target.startswith("gateway-base"):  # the baseline checkout, with the config of the target it pairs
            assert self.baseline is not None
            paired = target.replace("gateway-base", "gateway")
            config = servers.without_slice(self.traced.get(paired) or self.configs[True], target)
            return servers.start_gateway(target, self.workdir, config, source=self.baseline, lag=lag)
        config = self.traced.get(target) or self.configs[target != "gateway-noredact"]
        return servers.start_gateway(target, self.workdir, config, workers=2 if target == "gateway-w2" else 1,
                                     lag=lag)

    def lag_prefix(self, target: str) -> Path:
        return self.workdir / f"lag-{target}"

    def faults(self, armed: bool) -> None:
        """Arm or disarm the fake upstream's faults (its `/fail/` prefix answers 503 while armed)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream.port, timeout=10)
        try:
            conn.request("POST", "/faults/arm" if armed else "/faults/disarm")
            conn.getresponse().read()
        finally:
            conn.close()

    def stop(self, target: str) -> None:
        if target in self.running:
            self.running.pop(target).stop()

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)
        self.upstream.stop()
        if self.sink is not None:
            self.sink.stop()
        self.states.close()


def loadgen(url: str, sc: Scenario, *, requests: int, duration_s: float, samples: bool = True,
            bearer: str = "") -> dict[str, Any]:
    """`bearer`: the credential to send (bench/variants.py's targets), none when empty."""
    fd, out = tempfile.mkstemp(prefix="loadgen-", suffix=".json")
    os.close(fd)
    argv = [sys.executable, "-m", "bench.loadgen", "--out", out, "--url", url, "--concurrency", str(sc.concurrency),
            "--requests", str(requests), "--duration-s", str(duration_s), "--ramp-s", str(sc.ramp_s),
            "--ttft-ms", str(sc.ttft_ms), "--chunks", str(sc.chunks), "--chunk-chars", str(sc.chunk_chars),
            "--gap-ms", str(sc.gap_ms), "--tail-ms", str(sc.tail_ms), *(["--words"] if sc.words else []),
            *(["--nospace"] if sc.nospace else []),
            "--api", sc.api, "--model", servers.MESSAGES_MODEL if sc.api == "messages" else "m"]
    if not samples:
        argv.append("--no-samples")
    if bearer:
        argv += ["--bearer", bearer]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, cwd=servers.ROOT, check=False, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"loadgen failed ({r.returncode}): {r.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(Path(out).read_text())
    finally:
        os.unlink(out)
    return result


class RoundEvents(threading.Thread):
    """What a scenario does to the server during a round: SIGHUP every `reload_every_s`, the upstream's
    faults armed `faults_at` of the way through. Timed events of the scenario, not synchronisation."""

    def __init__(self, pool: Pool, sc: Scenario, server: Server) -> None:
        super().__init__(daemon=True)
        self.pool, self.sc, self.server, self.done = pool, sc, server, threading.Event()

    def run(self) -> None:
        sc, t0 = self.sc, time.monotonic()
        armed = not sc.faults_at
        while not self.done.is_set():
            step = sc.reload_every_s or 0.05
            if self.done.wait(step):
                return
            if sc.reload_every_s and self.server.proc.poll() is None:
                self.server.proc.send_signal(signal.SIGHUP)
            if not armed and time.monotonic() - t0 >= sc.faults_at * sc.duration_s:
                self.pool.faults(True)
                armed = True


def measure_round(pool: Pool, sc: Scenario, target: str, m: Measure) -> None:
    server = pool.get(target)
    before, up_before = usage(server.pid), usage(pool.upstream.pid)
    if not m.rss_before_kib:
        m.rss_before_kib, m.procs = before.rss_kib, before.procs
    events = RoundEvents(pool, sc, server) if sc.reload_every_s or sc.faults_at else None
    t0 = time.time()
    if events is not None:
        events.start()
    attack = hostile.start(server.url_for("chat"), sc.hostile, sc.duration_s) if sc.hostile else None
    try:
        lg = loadgen(server.url_for(sc.api), sc, requests=sc.requests, duration_s=sc.duration_s,
                     bearer=pool.bearer(target))
    finally:
        if events is not None:
            events.done.set()
            events.join()
        if attack is not None:
            m.hostile.update(hostile.finish(*attack))
    for late, on_cpu in loop_lag.samples(pool.lag_prefix(target), t0, time.time()):
        m.lag_ms.append(late)
        m.lag_cpu_ms.append(on_cpu)
    after, up_after = usage(server.pid), usage(pool.upstream.pid)
    m.add_round(lg, after.cpu_s - before.cpu_s, up_after.cpu_s - up_before.cpu_s)
    m.hwm_after_kib = after.hwm_kib


def run_scenario(pool: Pool, sc: Scenario) -> dict[str, Measure]:
    measures = {t: Measure() for t in sc.targets}
    for r in range(sc.rounds):
        order = sc.targets if r % 2 == 0 else tuple(reversed(sc.targets))
        for target in order:
            if sc.faults_at:
                pool.faults(False)  # the first failure comes in the measured round, not in the warm-up
            server = pool.get(target, fresh=sc.fresh and r == 0)
            if (r == 0 or sc.fresh) and sc.warmup:
                # warm-up: the same shape, not counted (imports, pools, caches, allocator arenas)
                loadgen(server.url_for(sc.api), sc, requests=sc.warmup, duration_s=0, samples=False,
                        bearer=pool.bearer(target))
            m = measures[target]
            ok, failed = m.ok, sum(m.errors.values())
            measure_round(pool, sc, target, m)
            if sc.fresh:
                pool.stop(target)  # free its memory before the next target's measurement
            print(f"  {sc.key} {target:<17} round {r + 1}: {m.ok - ok} ok, "
                  f"{sum(m.errors.values()) - failed} errors", flush=True)
    return measures


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def python_build() -> str:
    """How this interpreter was built, which moves every CPU figure here by 10-20% (bench/README.md, "#34
    point 4, seventh look"): whether libpython is a shared library (read from this process's own
    mappings: a distribution's sysconfig may describe another of its builds) and whether its configure
    asked for PGO and LTO (Debian builds them without recording it there)."""
    maps = Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else ""
    linked = "libpython shared" if "libpython" in maps else "libpython linked in"
    args = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    asked = [flag for flag in ("--enable-optimizations", "--with-lto") if flag in args]
    return f"{sys.executable}: {linked}; configure: {' '.join(asked) or 'no PGO/LTO flags recorded'}"


def machine(redaction_off_because: str, nofile: int, nginx_bin: str) -> dict[str, str]:
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    nginx_v = subprocess.run([nginx_bin, "-v"], capture_output=True, text=True, check=False).stderr.strip()
    return {
        "nproc": str(os.cpu_count()), "CPU": _cpu_model(), "RAM": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(), "Python": platform.python_version(), "Python build": python_build(),
        "aiohttp": version("aiohttp"), "uvloop": version("uvloop"), "orjson": version("orjson"),
        "nginx": nginx_v.replace("nginx version: ", ""),
        "gateway redaction": f"OFF in every target: {redaction_off_because}" if redaction_off_because
        else "secrets+pii (all gateway targets but gateway-noredact)",
        "RLIMIT_NOFILE": str(nofile), "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a short smoke run (seconds per scenario)")
    p.add_argument("--only", help="comma-separated scenario keys, e.g. S1,S2")
    p.add_argument("--out", default=str(servers.ROOT / "bench" / "results"))
    p.add_argument("--streams", type=int, help="S4's number of open streams (default 5000)")
    p.add_argument("--baseline", help="another checkout (e.g. a `git worktree` of an older commit): measured "
                   "as target gateway-base beside gateway in every scenario, redaction on, for an A/B")
    p.add_argument("--tracing", action="store_true", help="also measure gateway-traced (every request "
                   "traced, spans exported to a sink) and gateway-traced-down (its collector down) in S1 and S2")
    p.add_argument("--store", nargs="?", const="sqlite", help="also measure gateway-store in S1 and S2: the "
                   "control plane's store on (a spend row per request); a postgresql:// URL, or a SQLite file "
                   "in the run's temp dir when given without one")
    p.add_argument("--sched-slice-us", type=int, default=0, help="server.sched_slice_us for this checkout's "
                   "gateway targets (a `gateway-base` target runs without it: with --baseline, an A/B of it)")
    p.add_argument("--pin", action="store_true", help="every relay target (the gateways, nginx) on a CPU of its "
                   "own, the load generators and the fake upstream on the others, as in a deployment: no relay "
                   "waits behind the load for a core (direct's figures then come from the others' CPUs)")
    p.add_argument("--ledger-journal", choices=("auto", "off", "on"), default="auto", help="with --store: "
                   "the store's ledger journal as configured by default (auto: SQLite on, PostgreSQL off), off, or "
                   "on (a directory in the run's temp dir)")
    p.add_argument("--variants", action="store_true", help="also measure S2's variants (bench/variants.py): "
                   "gateway-key/-jwt (#58), gateway-ordered/-latency/-weighted (#59), gateway-redis/-cluster (#61)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    nofile = raise_nofile()
    scenarios = select(args.only.split(",") if args.only else None, args.quick)
    if args.streams:
        scenarios = [replace(sc, concurrency=args.streams, requests=args.streams, title=sc.title.replace(
            str(sc.concurrency), str(args.streams))) if sc.key == "S4" else sc for sc in scenarios]
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    t0 = time.monotonic()
    raw: dict[str, dict[str, Measure]] = {}
    baseline = Path(args.baseline).resolve() if args.baseline else None
    if baseline is not None:
        scenarios = [replace(sc, targets=(*sc.targets[:2], "gateway-base", *sc.targets[2:])) if sc.key != "S2f"
                     else replace(sc, targets=(*sc.targets, "gateway-base-faults")) for sc in scenarios]
    if args.tracing:
        traced: tuple[str, ...] = ("gateway-traced", "gateway-traced-down")
        if baseline is not None:  # the baseline traced too, to its own sink target's config
            traced += ("gateway-base-traced",)
        scenarios = [replace(sc, targets=(*sc.targets[:-1], *traced, sc.targets[-1])) if sc.key in ("S1", "S2")
                     else sc for sc in scenarios]
    store_url = None
    if args.store:
        store_url = f"sqlite:///{workdir}/store.db" if args.store == "sqlite" else args.store
        scenarios = [replace(sc, targets=(*sc.targets[:-1], "gateway-store", sc.targets[-1]))
                     if sc.key in ("S1", "S2") else sc for sc in scenarios]
    if args.variants:
        scenarios = [replace(sc, targets=(*sc.targets[:-1], *variants.TARGETS, sc.targets[-1]))
                     if sc.key == "S2" else sc for sc in scenarios]
    journal = {"auto": None, "off": "off", "on": str(workdir / "ledger")}[args.ledger_journal]
    pool = Pool(workdir, baseline, tracing=args.tracing, store_url=store_url, ledger_journal=journal,
                sched_slice_us=args.sched_slice_us, pin=args.pin, with_variants=args.variants)
    print(f"servers' logs: {workdir}", flush=True)
    try:
        info = machine(pool.redaction_off_because, nofile, pool.nginx_bin)
        info["layout"] = (f"--pin: relays on CPU {sorted(pool.relay_cpus)}, clients and upstream on the others"
                          if pool.relay_cpus is not None else "shared cores: relays, clients and upstream together")
        for sc in scenarios:
            print(f"{sc.key}: {sc.title}", flush=True)
            raw[sc.key] = run_scenario(pool, sc)
    finally:
        pool.stop_all()
    info["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["run time"] = f"{time.monotonic() - t0:.0f} s" + (" (--quick: a smoke run, not a measurement)"
                                                          if args.quick else "")
    summary = {k: summarize(sc, raw[k]) for sc in scenarios if (k := sc.key) in raw}
    errors = {k: {t: {"counts": dict(m.errors), "first": m.error_samples, "hostile": dict(m.hostile)}
                  for t, m in v.items()} for k, v in raw.items()}
    checks = verdicts(summary)
    text = markdown(info, scenarios, summary, errors, checks)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"{stamp}.md").write_text(text)
    (out / f"{stamp}.json").write_text(json.dumps({"machine": info, "summary": summary, "errors": errors},
                                                  indent=1, default=str))
    shutil.copyfile(out / f"{stamp}.md", out / "latest.md")
    print("\n" + text)
    if any(m.errors for v in raw.values() for m in v.values()):
        print(f"errors seen: the servers' logs are kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
