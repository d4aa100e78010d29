"""What a streamed request costs before its chunks (issue #63): S2 answered in 1 chunk and in 50, user and
system CPU apart, for the gateway beside nginx (and a baseline checkout, with `--baseline`).

Each round runs every target once per answer length, the targets in turn (reversed every other round, so
that a drift of the machine's speed falls on each alike). A target's CPU is utime and stime of its process
tree from /proc over the round, divided by the requests it served. From the two lengths: the fixed cost
(what a request costs with no chunks, extrapolated) and the cost per chunk.

    python -m bench.fixed_cost [--baseline ../base] [--rounds 6] [--seconds 5] [--chunks 1,50] [--noredact]

Why: `bench.instructions` counts instructions, which this machine's speed cannot move but which do not
say what a request costs in time (a build with 15% fewer instructions per S2 request measured 2% less
CPU; bench/README.md, "#63, 2026-12-07"). This says where the time goes: in the kernel or in the process,
per request or per chunk.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import servers
from bench.procstat import user_sys_s
from bench.run import loadgen, raise_nofile
from bench.scenarios import FULL, Scenario


@dataclass(slots=True)
class Tally:
    """One target at one answer length, summed over the rounds."""

    user_s: float = 0.0
    sys_s: float = 0.0
    requests: int = 0

    def per_request_ms(self) -> tuple[float, float]:
        n = max(self.requests, 1)
        return self.user_s * 1e3 / n, self.sys_s * 1e3 / n


def split(short: tuple[int, float], long: tuple[int, float]) -> tuple[float, float]:
    """(fixed, per chunk) from the cost per request at two answer lengths, (chunks, cost) each: the line
    through both points, at 0 chunks and its slope."""
    (n1, c1), (n2, c2) = short, long
    if n1 == n2:
        raise ValueError("two different answer lengths are needed")
    per_chunk = (c2 - c1) / (n2 - n1)
    return c1 - per_chunk * n1, per_chunk


def _round(targets: dict[str, servers.Server], sc: Scenario, seconds: float, tallies: dict[tuple[str, int], Tally],
           reverse: bool) -> None:
    order = list(targets.items())
    for name, server in reversed(order) if reverse else order:
        u0, s0 = user_sys_s(server.pid)
        result = loadgen(server.url_for(sc.api), sc, requests=0, duration_s=seconds, samples=False)
        u1, s1 = user_sys_s(server.pid)
        t = tallies.setdefault((name, sc.chunks), Tally())
        t.user_s, t.sys_s, t.requests = t.user_s + u1 - u0, t.sys_s + s1 - s0, t.requests + int(result["ok"])


def report(tallies: dict[tuple[str, int], Tally], names: list[str], lengths: list[int]) -> str:
    lines = ["| target | chunks | user ms/req | system ms/req | CPU ms/req | ÷ nginx |", "|---|---|---|---|---|---|"]
    for n in lengths:
        nginx = sum(tallies[("nginx", n)].per_request_ms()) if ("nginx", n) in tallies else 0.0
        for name in names:
            user, system = tallies[(name, n)].per_request_ms()
            ratio = f"{(user + system) / nginx:.2f}x" if nginx else "-"
            lines.append(f"| {name} | {n} | {user:.4f} | {system:.4f} | {user + system:.4f} | {ratio} |")
    if len(lengths) >= 2:
        short, long = min(lengths), max(lengths)
        lines += ["", "| target | fixed ms/req (user, system) | per chunk µs (user, system) |", "|---|---|---|"]
        for name in names:
            (u1, s1), (u2, s2) = tallies[(name, short)].per_request_ms(), tallies[(name, long)].per_request_ms()
            fu, pu = split((short, u1), (long, u2))
            fs, ps = split((short, s1), (long, s2))
            lines.append(f"| {name} | {fu + fs:.4f} ({fu:.4f}, {fs:.4f}) | {1e3 * (pu + ps):.2f} "
                         f"({1e3 * pu:.2f}, {1e3 * ps:.2f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fixed_cost", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="another checkout, run as `gateway-base`")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=5.0, help="each target's load per round and length")
    p.add_argument("--chunks", default="1,50", help="answer lengths, comma-separated")
    p.add_argument("--noredact", action="store_true", help="the gateway with redaction off")
    p.add_argument("--log-info", action="store_true",
                   help="the gateways at logging level info: each request's line written, as in production")
    args = p.parse_args(argv)
    raise_nofile()
    lengths = sorted({int(x) for x in args.chunks.split(",")})
    s2 = next(s for s in FULL if s.key == "S2")
    workdir = Path(tempfile.mkdtemp(prefix="fixed-cost-"))
    upstream = servers.start_upstream(workdir)
    targets: dict[str, servers.Server] = {}
    try:
        targets["nginx"] = servers.start_nginx(workdir, upstream.port, servers.ensure_nginx())
        config = workdir / "gateway.yaml"
        config.write_text(servers.gateway_config(upstream.port, redaction=not args.noredact,
                                                 log_level="info" if args.log_info else "warning"))
        targets["gateway"] = servers.start_gateway("gateway", workdir, config)
        if args.baseline:
            targets["gateway-base"] = servers.start_gateway("gateway-base", workdir, config,
                                                            source=Path(args.baseline).resolve())
        tallies: dict[tuple[str, int], Tally] = {}
        for r in range(args.rounds):
            for n in lengths:
                _round(targets, dataclasses.replace(s2, chunks=n), args.seconds, tallies, reverse=r % 2 == 1)
            print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
    finally:
        for server in targets.values():
            server.stop()
        upstream.stop()
    print(report(tallies, list(targets), lengths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
