"""Where the gateway's added TTFT goes, from packet timestamps on loopback (issue #34, point 4).

Runs S1's shape through the gateway (redaction off) with `bench.ttft_probe`'s raw-socket client while
`tcpdump` records the loopback traffic, then splits each request's TTFT at the packets (kernel
timestamps, so no process's own clock or wake-up is in them):

    in    client's request -> the gateway's upstream request   (the gateway's request path + wake-ups)
    up    the gateway's upstream request -> the first token arrives from the upstream (50 ms + timer)
    out   the first token from the upstream -> the gateway's first write to the client
    read  that write -> the client has read it (the client's wake-up; from the probe's own clock)

and the same for direct (client -> upstream -> first token). `--target` measures another relay the same
way (`pyrelay`, `nginx`: the floors the gateway's hops compare with). Needs tcpdump and root
(CAP_NET_RAW).

    python -m bench.ttft_hops --requests 400 --concurrency 8 [--target pyrelay]
    python -m bench.ttft_hops --requests 100 --concurrency 1 --idle   # a request a second
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import raw_client, ttft_probe

_LINE = re.compile(rb"^(\d+\.\d+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+): .*length (\d+)")
_SEED = re.compile(rb'"seed":\s*(\d+)')


@dataclass(slots=True)
class Packet:
    t: float
    src: int
    dst: int
    payload: bytes


def read_capture(pcap: Path) -> list[Packet]:
    """tcpdump's own text output of the capture (-A: payload as ASCII), payload-carrying packets only."""
    text = subprocess.run(["tcpdump", "-r", str(pcap), "-nn", "-tt", "-A"], capture_output=True, check=True).stdout
    packets: list[Packet] = []
    for block in re.split(rb"\n(?=\d+\.\d+ IP )", text):
        m = _LINE.match(block)
        if m and int(m[4]) > 0:
            packets.append(Packet(float(m[1]), int(m[2]), int(m[3]), block))
    return packets


def requests_on(packets: list[Packet], server_port: int) -> dict[int, tuple[float, float]]:
    """seed -> (request's first packet, first content packet back): per connection to `server_port`,
    answers follow requests in order; the first token is the first answer packet 10 ms or more after
    the request (the fake upstream sends its head at once and the first token 50 ms later)."""
    by_conn: dict[int, list[Packet]] = defaultdict(list)
    for p in packets:
        if server_port in (p.src, p.dst):
            by_conn[p.src if p.dst == server_port else p.dst].append(p)
    out: dict[int, tuple[float, float]] = {}
    for conn in by_conn.values():
        seed, t_req = -1, 0.0
        for p in conn:
            if p.dst == server_port and (m := _SEED.search(p.payload)):
                seed, t_req = int(m[1]), p.t
            elif p.src == server_port and seed >= 0 and p.t - t_req > 0.010:
                out[seed] = (t_req, p.t)
                seed = -1
    return out


def capture(port_filter: str, run: Callable[[], None]) -> list[Packet]:
    with tempfile.TemporaryDirectory(prefix="ttft-hops-") as tmp:
        pcap = Path(tmp) / "lo.pcap"
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-nn", "-s", "2048", "-w", str(pcap),
                                 "--time-stamp-precision=micro", port_filter],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # tcpdump attached
        try:
            run()
            time.sleep(0.5)
        finally:
            dump.terminate()
            dump.wait(10)
        return read_capture(pcap)


def p50(xs: list[float]) -> float:
    return statistics.median(xs) * 1000 if xs else float("nan")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rt", action="store_true", help="servers and client at SCHED_FIFO 1 (see bench.ttft_probe)")
    p.add_argument("--idle", action="store_true",
                   help="a second's pause after each request (bench.ttft_probe's `idle`): a gateway at a request "
                        "a second per client")
    p.add_argument("--target", default="gateway-noredact", choices=["gateway-noredact", "gateway", "pyrelay", "nginx"],
                   help="what sits between the client and the upstream")
    args = p.parse_args(argv)
    target = args.target
    habits = raw_client.Habits(pause_s=ttft_probe.IDLE_PAUSE_S if args.idle else 0.0)
    with tempfile.TemporaryDirectory(prefix="ttft-hops-") as tmp:
        started = ttft_probe.start_targets(Path(tmp), ["direct", target], False)
        up_port, gw_port = started["direct"].port, started[target].port
        try:
            if args.rt:
                ttft_probe.realtime([s.pid for s in started.values()])
            for server in started.values():
                raw_client.run_clients("raw", server.url, raw_client.Habits(), 64, args.concurrency)
            got: dict[str, raw_client.Samples] = {}
            t_split = [0.0]

            def run() -> None:
                for name in ("direct", target):
                    t_split[0] = time.time()  # the capture's clock: the gateway's run starts after this
                    got[name] = raw_client.run_clients("raw", started[name].url, habits, args.requests,
                                                       args.concurrency)
            packets = capture(f"tcp port {up_port} or tcp port {gw_port}", run)
        finally:
            ttft_probe.stop_all(started)
    split = t_split[0]
    gw = requests_on([p for p in packets if p.t >= split], gw_port)
    direct = requests_on([p for p in packets if p.t < split], up_port)
    via = requests_on([p for p in packets if p.t >= split], up_port)
    hops_in = [via[s][0] - gw[s][0] for s in gw if s in via]
    hops_up = [via[s][1] - via[s][0] for s in gw if s in via]
    hops_out = [gw[s][1] - via[s][1] for s in gw if s in via]
    wire_gw = [gw[s][1] - gw[s][0] for s in gw]
    wire_direct = [b - a for a, b in direct.values()]
    print(f"requests matched: {target} {len(hops_in)}, direct {len(wire_direct)}")
    print("p50 ms (packet timestamps):")
    print(f"  direct   request -> first token packet     {p50(wire_direct):.3f}")
    print(f"  {target}  request -> first token packet     {p50(wire_gw):.3f}  "
          f"(added {p50(wire_gw) - p50(wire_direct):.3f})")
    print(f"    in:  client request -> upstream request   {p50(hops_in):.3f}")
    print(f"    up:  upstream request -> first token      {p50(hops_up):.3f}")
    print(f"    out: first token in -> first token out    {p50(hops_out):.3f}")
    for name, s in got.items():
        print(f"  client-side TTFT p50 {name}: {statistics.median(s.ttft_ms):.3f} ms ({s.errors} errors)")


if __name__ == "__main__":
    main()
