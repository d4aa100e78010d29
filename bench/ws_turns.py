"""Agent turns over the Responses API's WebSocket mode vs HTTP (issue #60): the same conversation of 10
turns, Codex's way, through the gateway's Responses bridge to the fake upstream (as Anthropic, model `ma`):

    websocket  one connection; each turn sends only its new input item with `previous_response_id`
               (the gateway keeps the conversation and sends the upstream the whole of it)
    http       one keep-alive connection; each turn POSTs the whole input so far (`store: false`)

Two shapes of turn: `minimal` (a line of question, a word of answer: the transports' own cost shows
most) and `agent` (what Codex sends, in size: ~8 KB of instructions and six tool schemas with every
request, on both transports, and ~2.4 KB of a tool's output as each turn's new input).

Per turn: the gateway process's CPU (the scheduler's run time of its threads over each conversation,
conversations of the two transports alternated one by one; the ratio to http's with a bootstrap 95%
interval over the pairs) and the added TTFT (the client's send to its first `response.output_text.delta`,
minus the same for the fake upstream asked directly with the turn's Messages request). Prints a
markdown table (bench/README.md).

    python -m bench.ws_turns [--pairs 300] [--turns 10 | --turns 3,10,30] [--shape minimal,agent] [--pin]
    python -m bench.ws_turns --instructions [--pairs 10] [--turns 10] [--shape minimal]

`--instructions` runs the gateway under valgrind's callgrind instead (as `bench.instructions` does) and
counts the user-space instructions per turn of each transport: a figure this machine's load does not
move (blind to system calls and cache misses), for judging a change to either path.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from bench import procstat, servers
from bench.affinity import set_process_affinity, set_tree_affinity, split_cpus

_TOTALS = re.compile(rb"^totals:\s*(\d+)", re.M)
LINE = "Please look at the next file and tell me what it does, briefly. " * 4  # a turn's new user text
# `--shape agent`: what Codex sends on each turn, in size (its own are larger): instructions and tool
# schemas with every request, on both transports; and each turn's new input is a tool's output
INSTRUCTIONS = "You are a coding agent running in a terminal. Read files before changing them. " * 100  # ~8 KB
TOOLS = [{"type": "function", "name": f"tool_{n}", "description": "Runs a command in the workspace. " * 12,
          "parameters": {"type": "object", "properties": {
              "command": {"type": "array", "items": {"type": "string"}, "description": "argv"},
              "workdir": {"type": "string"}, "timeout_ms": {"type": "integer"}}, "required": ["command"]}}
         for n in ("shell", "apply_patch", "update_plan", "view_image", "read_file", "list_dir")]
OUTPUT = "".join(f"-rw-r--r-- 1 dev dev {40 * n:>6} Dec  6 12:00 src/module_{n}.py\n" for n in range(40))  # ~2.4 KB
SHAPES = ("minimal", "agent")


def _user(i: int, shape: str = "minimal") -> dict[str, Any]:
    text = f"{i}: {LINE}" if shape == "minimal" else f"exit code 0; output of `ls -l src` ({i}):\n{OUTPUT}"
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _create(shape: str) -> dict[str, Any]:
    """The fields besides `input` every request of a conversation carries."""
    extra = {"instructions": INSTRUCTIONS, "tools": TOOLS} if shape == "agent" else {}
    return {"model": servers.MESSAGES_MODEL, "store": False, **extra}


def _read_sse_turn(resp: http.client.HTTPResponse, t0: float) -> tuple[float, list[Any]]:
    """Read one streamed Responses answer: (TTFT, the completed response's output)."""
    ttft = 0.0
    event = b""
    while True:
        line = resp.readline()
        if not line:
            raise RuntimeError("the stream ended before response.completed")
        if line.startswith(b"event: "):
            event = line[7:].strip()
        elif line.startswith(b"data: "):
            if event == b"response.output_text.delta" and not ttft:
                ttft = time.perf_counter() - t0
            elif event == b"response.completed":
                resp.read()
                return ttft, orjson.loads(line[6:])["response"]["output"]


def http_conversation(port: int, turns: int, shape: str = "minimal") -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    items: list[Any] = []
    ttfts = []
    for i in range(turns):
        items.append(_user(i, shape))
        body = orjson.dumps({**_create(shape), "input": items, "stream": True})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/responses", body, {"Content-Type": "application/json"})
        ttft, output = _read_sse_turn(conn.getresponse(), t0)
        ttfts.append(ttft)
        items.extend(output)
    conn.close()
    return ttfts


class _SyncSocket:
    """A WebSocket client on a blocking socket over wsproto, in the caller's thread: no reader thread of
    its own to compete with the gateway for this machine's two cores (`websockets`' sync client has one),
    and each message parsed only when asked for (as the HTTP client reads a line at a time), so the
    TTFT is not charged with parsing the messages behind the first delta."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host=f"127.0.0.1:{port}", target="/v1/responses")))
        self.parts: list[str] = []
        while not any(isinstance(e, AcceptConnection) for e in self._read()):
            pass

    def _read(self) -> Any:
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("the gateway closed the connection")
        self.ws.receive_data(data)
        return self.ws.events()

    def send(self, text: str) -> None:
        self.sock.sendall(self.ws.send(TextMessage(text)))

    def recv(self) -> str:
        events = self.ws.events()  # wsproto resumes where the last call stopped
        while True:
            for event in events:
                if not isinstance(event, TextMessage):
                    raise RuntimeError(f"unexpected {event!r}")
                self.parts.append(event.data)
                if event.message_finished:
                    text = "".join(self.parts)
                    self.parts.clear()
                    return text
            events = self._read()

    def close(self) -> None:
        self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        self.sock.close()


def ws_conversation(port: int, turns: int, shape: str = "minimal") -> list[float]:
    ttfts = []
    previous = None
    ws = _SyncSocket(port)
    for i in range(turns):
        msg: dict[str, Any] = {"type": "response.create", **_create(shape), "input": [_user(i, shape)]}
        if previous:
            msg["previous_response_id"] = previous
        t0 = time.perf_counter()
        ws.send(orjson.dumps(msg).decode())
        ttft = 0.0
        while True:
            event = orjson.loads(ws.recv())
            if event["type"] == "response.output_text.delta" and not ttft:
                ttft = time.perf_counter() - t0
            elif event["type"] == "response.completed":
                previous = event["response"]["id"]
                break
            elif event["type"] == "error":
                raise RuntimeError(f"error event: {event}")
        ttfts.append(ttft)
    ws.close()
    return ttfts


def direct_ttfts(port: int, turns: int, shape: str = "minimal") -> list[float]:
    """The fake upstream asked directly, Anthropic's way, with each turn's whole conversation."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    messages: list[Any] = []
    system = {"system": INSTRUCTIONS} if shape == "agent" else {}
    ttfts = []
    for i in range(turns):
        messages.append({"role": "user", "content": _user(i, shape)["content"][0]["text"]})
        body = orjson.dumps({"model": "up-model", "max_tokens": 256, "stream": True, "messages": messages, **system})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/messages", body, {"Content-Type": "application/json", "x-api-key": "x",
                                                     "anthropic-version": "2023-06-01"})
        resp = conn.getresponse()
        ttft = 0.0
        while line := resp.readline():
            if b"content_block_delta" in line and not ttft:
                ttft = time.perf_counter() - t0
            if b"message_stop" in line:
                resp.read()
                break
        ttfts.append(ttft)
        messages.append({"role": "assistant", "content": "ok"})
    conn.close()
    return ttfts


def _runs(shape: str) -> dict[str, Any]:
    return {"http": partial(http_conversation, shape=shape), "websocket": partial(ws_conversation, shape=shape)}


def compare(gw: servers.Server, pairs: int, turns: int, shape: str) -> dict[str, tuple[list[float], list[float]]]:
    """Conversations of each transport, alternated one by one, each one's gateway CPU read as the
    scheduler's run time of its threads (`procstat.run_time_s`, ns): the machine's speed drifts between
    runs by more than the difference measured, and pairs of neighbours share it. Every turn's TTFT too."""
    runs = _runs(shape)
    for run in runs.values():
        run(gw.port, turns)  # warm-up: imports, pools
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    ttfts: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(pairs):
        for name, run in (runs.items() if i % 2 == 0 else list(runs.items())[::-1]):
            before = procstat.run_time_s(gw.pid)
            ttfts[name] += run(gw.port, turns)
            cpu[name].append(procstat.run_time_s(gw.pid) - before)
    return {name: (cpu[name], ttfts[name]) for name in runs}


def ratio_interval(num: list[float], den: list[float], draws: int = 2000) -> tuple[float, float]:
    """A 95% bootstrap interval of sum(num) / sum(den) over the pairs (num[i], den[i])."""
    rng = random.Random(0)
    n = len(num)
    ratios = sorted(sum(num[j] for j in picks) / sum(den[j] for j in picks)
                    for picks in ([rng.randrange(n) for _ in range(n)] for _ in range(draws)))
    return ratios[draws // 40], ratios[draws - 1 - draws // 40]


def _callgrind_gateway(workdir: Path, config: Path) -> servers.Server:
    port = servers.free_port()
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={workdir}/cg.out",
            sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port),
            "--metrics-port", str(servers.free_port())]
    gw = servers.spawn("gateway-callgrind", argv, workdir, port)
    gw.wait_ready("/healthz", timeout_s=300)  # under callgrind the start takes a minute
    return gw


def _counted(gw: servers.Server, workdir: Path, run: Any, conversations: int, turns: int) -> float:
    """Instructions per turn of `conversations` runs of `run`, counted alone (zeroed, on, off, dumped)."""
    control = shutil.which("callgrind_control") or "callgrind_control"
    before = set(workdir.glob("cg.out*"))
    subprocess.run([control, "-z", str(gw.pid)], capture_output=True, check=True)
    subprocess.run([control, "-i", "on", str(gw.pid)], capture_output=True, check=True)
    for _ in range(conversations):
        run(gw.port, turns)
    subprocess.run([control, "-i", "off", str(gw.pid)], capture_output=True, check=True)
    subprocess.run([control, "-d", str(gw.pid)], capture_output=True, check=True)
    dumps = set(workdir.glob("cg.out*")) - before
    total = sum(int(m.group(1)) for f in dumps if (m := _TOTALS.search(f.read_bytes())) is not None)
    return total / (conversations * turns)


def instructions(conversations: int, turns: int, rounds: int, shape: str) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-ws-ir-"))
    up = servers.start_upstream(workdir)
    config = workdir / "gateway.yaml"
    config.write_text(servers.gateway_config(up.port, redaction=False))
    gw = _callgrind_gateway(workdir, config)
    runs = _runs(shape)
    counts: dict[str, list[float]] = {name: [] for name in runs}
    try:
        for run in runs.values():
            for _ in range(3):
                run(gw.port, turns)  # warm-up: imports, pools, caches
        for r in range(rounds):
            order = list(runs.items())
            for name, run in order if r % 2 == 0 else order[::-1]:
                counts[name].append(_counted(gw, workdir, run, conversations, turns))
    finally:
        gw.proc.send_signal(signal.SIGTERM)
        gw.proc.wait(timeout=120)
        up.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{rounds} rounds of {conversations} conversations x {turns} turns ({shape}) under callgrind\n")
    print("| transport | instructions per turn (min) | every round |")
    print("| --- | --- | --- |")
    for name, vs in counts.items():
        print(f"| {name} | {min(vs):,.0f} | {', '.join(f'{v:,.0f}' for v in vs)} |")
    http, ws = min(counts["http"]), min(counts["websocket"])
    print(f"\nwebsocket / http: {ws / http - 1:+.1%}")


def _turn_counts(text: str) -> list[int]:
    counts = [int(t) for t in text.split(",") if t.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("--turns: one or more positive counts, e.g. 10 or 3,10,30")
    return counts


def _rows(gw: servers.Server, up_port: int, pairs: int, turns: int, shape: str) -> list[str]:
    """The table's two rows for conversations of `turns` turns (added TTFT against the upstream asked
    directly with the same conversations)."""
    base = statistics.median([t for _ in range(min(pairs, 30)) for t in direct_ttfts(up_port, turns, shape)])
    measured = compare(gw, pairs, turns, shape)
    http_cpu = measured["http"][0]
    rows = []
    for name, (cpu, ttfts) in measured.items():
        q = statistics.quantiles(ttfts, n=100)
        low, high = ratio_interval(cpu, http_cpu)
        rows.append(f"| {turns} | {shape} | {name} | {sum(cpu) / len(cpu) / turns * 1000:.3f} | "
                    f"{sum(cpu) / sum(http_cpu):.3f} ({low:.3f}-{high:.3f}) | "
                    f"{(statistics.median(ttfts) - base) * 1000:.2f} | {(q[94] - base) * 1000:.2f} |")
    return rows


def _shapes(text: str) -> list[str]:
    shapes = [t.strip() for t in text.split(",") if t.strip()]
    if not shapes or any(t not in SHAPES for t in shapes):
        raise argparse.ArgumentTypeError(f"--shape: one or more of {', '.join(SHAPES)}")
    return shapes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=300, help="conversations of each transport, alternated")
    p.add_argument("--turns", type=_turn_counts, default=[10], help="turns per conversation; a comma-separated "
                   "list (3,10,30) measures each in turn: a connection's set-up is shared by fewer or more turns")
    p.add_argument("--shape", type=_shapes, default=["minimal", "agent"], help="what a turn carries: minimal (a "
                   "line of question, a word of answer), agent (Codex's instructions and tools, a tool's output); "
                   "a comma-separated list measures each")
    p.add_argument("--instructions", action="store_true", help="count instructions per turn under callgrind "
                   "(--pairs conversations of each transport, twice)")
    p.add_argument("--source", help="the checkout whose gateway runs (default: this one), e.g. a worktree of main")
    p.add_argument("--pin", action="store_true", help="the gateway on a CPU of its own, this client and the "
                   "upstream on the others (bench/affinity.py): the client's own work then moves no figure")
    args = p.parse_args()
    if args.instructions:
        for shape in args.shape:
            for turns in args.turns:
                instructions(args.pairs, turns, 2, shape)
        return
    relay_cpus = None
    if args.pin:  # this process first: the upstream inherits the clients' CPUs
        relay_cpus, rest = split_cpus(os.sched_getaffinity(0))
        set_process_affinity(os.getpid(), rest)
    workdir = Path(tempfile.mkdtemp(prefix="gateway-ws-bench-"))
    up = servers.start_upstream(workdir)
    config = workdir / "gateway.yaml"
    config.write_text(servers.gateway_config(up.port, redaction=False))
    gw = servers.start_gateway("gateway", workdir, config,
                               source=Path(args.source).resolve() if args.source else servers.ROOT)
    if relay_cpus is not None:
        set_tree_affinity(gw.pid, relay_cpus)
    try:
        rows = [row for shape in args.shape for turns in args.turns
                for row in _rows(gw, up.port, args.pairs, turns, shape)]
    finally:
        gw.stop()
        up.stop()
    layout = f", the gateway alone on CPU {sorted(relay_cpus)}" if relay_cpus else ""
    print(f"{args.pairs} conversations of each transport per row, alternated one by one, through the Responses "
          f"bridge to the fake upstream{layout}\n")
    print("| turns | shape | transport | gateway CPU per turn (ms) | ÷ http's (95% interval) | "
          "added TTFT p50 (ms) | added TTFT p95 (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
