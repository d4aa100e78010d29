"""WebSocket mode under load (docs/reference.md, WebSocket mode): a flood of `response.create` on one
connection while its response runs (each gets `response_in_progress`) does not stall the event loop for
other traffic (a /healthz poller's waits, measured in the loop's own CPU time as the loop-stall tests
do, here the test process's, where the loop's thread is the only one with work: p99 under 5 ms), the
flood of a client that reads none of the answers waits unread, and 1,000 idle connections cost a
bounded, measured amount of memory each.

The flooding client and the probe run in processes of their own (`tests/ws_flood_client.py`), and the
loop's thread gives way to the probe's process on the CPU they share (`_give_way`): what the probe's
waits then hold is the loop's CPU between its request and its answer, not the time the probe waited for
the GIL or a CPU while the loop was busy.
"""

from __future__ import annotations

import asyncio
import gc
import os
import select
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from gateway.apis.responses_ws import BATCH
from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream, Gate, Script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_responses_websocket import KEY, MESSAGES_PATH
from tests.integration.test_responses_websocket_hostile import _masked, handshake

# bounds the event loop's steps under a flood: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

ROUND = 10_000  # creates a write
FLOOD_MIN, FLOOD_MAX = 50_000, 300_000
SAMPLES = 1_000  # /healthz waits in the flood's window
CLIENTS = Path(__file__).resolve().parents[1] / "ws_flood_client.py"
IDLE_CONNECTIONS = 1_000
LAG_P99_S = 0.005
LOOP_NICE = 10
GAUGE = "llm_gateway_websocket_connections"
BUSY = b'{"type":"error","code":"response_in_progress"'  # once an event (the nested `error` repeats the code)
FLOODED = 60_000  # creates of the client that reads nothing
BUSY_FRAME = 320  # bytes: the `response_in_progress` event's frame is 310


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    # the response held at its gate while a flood runs must outlast the flood however slow the machine:
    # past `idle_s` it would end, and the flood's creates would start responses instead of being refused
    return make_gateway(parse_config({
        # one key holds the thousand idle connections (`test_a_thousand_idle_connections_cost_a_bounded_amount_each`)
        "server": {"max_body_bytes": 64 * 1024, "websocket_max_per_key": IDLE_CONNECTIONS},
        "auth": {"keys": [{"name": "ws", "key": KEY}]},
        "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                                 "timeouts": {"connect_s": 2, "first_token_s": 10, "idle_s": 600, "total_s": 900}}},
        "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]}],
    }, env={}))


class Child:
    """One of the flood's clients (`tests/ws_flood_client.py`) in a process of its own, spoken to in lines.
    The test's thread waits for its answers in `select`, holding no GIL and using no CPU: the loop's thread
    is the only one of the test's process with work while the probe measures it."""

    def __init__(self, *args: str, pass_fds: tuple[int, ...] = ()):
        self.proc = subprocess.Popen([sys.executable, str(CLIENTS), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, pass_fds=pass_fds, bufsize=0)
        self._heard = b""

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    def hear(self, seconds: float = 120) -> str | None:
        """Its next line, or None when none came within `seconds` (0: only one already there)."""
        assert self.proc.stdout is not None
        end = time.monotonic() + seconds
        while b"\n" not in self._heard:
            if not select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            assert chunk, "the client answered before it ended"
            self._heard += chunk
        line, _, self._heard = self._heard.partition(b"\n")
        return line.decode()

    def ask(self, line: str) -> str | None:
        self.say(line)
        return self.hear()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    """Children that a failed test leaves running are killed at its end."""
    made: list[Child] = []

    def make(*args: str, pass_fds: tuple[int, ...] = ()) -> Child:
        made.append(Child(*args, pass_fds=pass_fds))
        return made[-1]

    yield make
    for child in made:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait(10)


async def _give_way(cpu: int) -> None:
    """Run on the loop's thread (the fixture's, which ends with the test): it runs on `cpu` only, as the
    probe does, and gives way to it there (nice 10). The flood keeps the loop busy all the time; a probe
    ready to run but waiting for a CPU (2 cores, other processes) would count the loop's CPU meanwhile as
    its wait, though it had not asked the loop anything yet. Sharing one CPU, and first on it, the probe
    runs whenever it is ready, and while it waits for a CPU the loop does not run either."""
    os.sched_setaffinity(threading.get_native_id(), {cpu})
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOOP_NICE)


def test_a_flood_of_creates_while_one_runs_keeps_the_loop_serving(servers: LoopThread, upstream: FakeUpstream,
                                                                  gw: GatewayServer,
                                                                  spawn: Callable[..., Child]) -> None:
    gate = Gate(timeout_s=600)  # held through the flood, however slow the machine (see `gw`)
    events = [a.message_start(), a.ping(), *a.text_block(0, ["F", "inished."]), a.message_delta(), a.message_stop()]
    upstream.enqueue(MESSAGES_PATH, Script([*(a.event(e) for e in events[:4]), gate,
                                            *(a.event(e) for e in events[4:])]))
    create = _masked(orjson.dumps({"type": "response.create", "model": "claude", "input": "x"}))
    sock = handshake(gw.port)
    flood = spawn("flood", str(sock.fileno()), create.hex(), pass_fds=(sock.fileno(),))
    assert flood.ask("send 1") == "sent"
    assert flood.ask("wait delta 1 10") == "ok"  # the response now waits at the gate
    cpu = max(os.sched_getaffinity(0))
    servers.run(_give_way(cpu))
    gc.collect()
    gc.freeze()  # as the gateway's server does at its start (tests/loop_probe.py)
    probe = spawn("probe", str(gw.port), str(os.getpid()), str(SAMPLES), str(cpu))
    try:
        assert probe.hear(20) == "ready"
        probe.say("mark")
        t0, sent = time.monotonic(), 0
        # rounds until the window holds enough /healthz samples for its p99 (a few slow ones among too
        # few decide it), bounded by FLOOD_MAX
        while sent < FLOOD_MAX and (sent < FLOOD_MIN or probe.hear(0) != "enough"):
            assert flood.ask(f"send {ROUND}") == "sent"
            sent += ROUND
        assert flood.ask(f"wait busy {sent} 120") == "ok", "every create was answered"
        t1 = time.monotonic()
        probe.say("stop")
        while (line := probe.hear(20)) == "enough":
            pass
    finally:
        gc.unfreeze()
    assert line is not None and line.startswith("[")
    gate.opened.set()
    assert flood.ask("wait completed 1 10") == "ok"
    probe.close()
    flood.close()
    sock.close()
    waits = sorted(c for s, w, c in orjson.loads(line) if s <= t1 and s + w >= t0)
    assert len(waits) >= 100, f"/healthz kept answering during the flood: {len(waits)} answers in {t1 - t0:.1f} s"
    p99 = waits[int(len(waits) * 0.99) - 1]
    print(f"flood of {sent} creates: {t1 - t0:.2f} s; /healthz loop CPU p50 {waits[len(waits) // 2] * 1000:.2f} "
          f"ms, p99 {p99 * 1000:.2f} ms, max {waits[-1] * 1000:.2f} ms over {len(waits)}")
    assert p99 < LAG_P99_S
    assert len(upstream.bodies(MESSAGES_PATH)) == 1


def test_a_thousand_idle_connections_cost_a_bounded_amount_each(servers: LoopThread, gw: GatewayServer) -> None:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    socks = [handshake(gw.port) for _ in range(IDLE_CONNECTIONS)]
    servers.run(wait_until(lambda: gw.sample(GAUGE) == IDLE_CONNECTIONS, 20))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per = (after - before) / IDLE_CONNECTIONS
    print(f"{IDLE_CONNECTIONS} idle WebSocket connections: {per / 1024:.1f} KiB of Python heap each "
          "(gateway and the test's client sockets)")
    for s in socks:
        s.close()
    servers.run(wait_until(lambda: gw.sample(GAUGE) == 0, 20))
    assert per < 32 * 1024


def test_the_flood_of_a_client_that_reads_nothing_waits_unread(servers: LoopThread, upstream: FakeUpstream,
                                                               gw: GatewayServer) -> None:
    """Back-pressure (docs/reference.md, WebSocket mode): once the gateway's buffer for a client is past the
    transport's high-water mark, the client's next messages wait unread (wsproto keeps them, reading is
    paused) until it reads: the `response_in_progress` answers of a flood it never reads stop at the mark
    plus one batch, instead of one answer for every message the last read brought in."""
    gate = Gate()
    events = [a.message_start(), a.ping(), *a.text_block(0, ["F", "inished."]), a.message_delta(), a.message_stop()]
    upstream.enqueue(MESSAGES_PATH, Script([*(a.event(e) for e in events[:4]), gate,
                                            *(a.event(e) for e in events[4:])]))
    create = _masked(orjson.dumps({"type": "response.create", "model": "claude", "input": "x"}))
    sock = handshake(gw.port)
    sock.sendall(create)
    got = b""
    while b"response.output_text.delta" not in got:  # the response now waits at the gate
        chunk = sock.recv(65536)
        assert chunk, "the response started before the close"
        got += chunk
    sender = threading.Thread(target=_send_quietly, args=(sock, create * FLOODED), daemon=True)  # 4 MiB
    sender.start()
    assert gw.api is not None
    conn = next(c for c in gw.api.connections if c.tunnel is not None)

    async def most_buffered() -> tuple[int, int]:
        await wait_until(lambda: conn.writing_paused, 30)
        assert conn.transport is not None
        most = 0
        for _ in range(1000):  # loop iterations: a batch of messages is taken in one at most
            most = max(most, conn.transport.get_write_buffer_size())
            await asyncio.sleep(0)
        return most, conn.transport.get_write_buffer_limits()[1]

    most, high = servers.run(most_buffered())
    print(f"a flood the client does not read: {most} bytes buffered at most (high-water mark {high})")
    assert most <= high + BATCH * BUSY_FRAME
    # once the client reads, the messages that waited are taken: every one is answered
    assert _count_read(sock, BUSY, FLOODED) == FLOODED
    sender.join(10)
    gate.opened.set()
    assert _count_read(sock, b"response.completed", 1) == 1
    sock.close()
    servers.run(wait_until(lambda: gw.sample(GAUGE) == 0, 10))


def _count_read(sock: socket.socket, what: bytes, count: int) -> int:
    """Read until `what` came `count` times (a recv that times out, 10 s, fails the test)."""
    seen, tail = 0, b""
    while seen < count:
        chunk = sock.recv(1 << 20)
        assert chunk, f"{count} of {what!r} came before the close"
        data = tail + chunk
        seen += data.count(what) - tail.count(what)
        tail = data[-(len(what) - 1):]
    return seen


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:  # the test shut the socket down while the gateway was not reading
        return
