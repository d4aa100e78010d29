"""WebSocket mode under load (docs/reference.md, WebSocket mode): a flood of `response.create` on one
connection while its response runs (each gets `response_in_progress`) does not stall the event loop for
other traffic (a /healthz poller's waits, measured in the loop thread's own CPU time as the loop-stall
tests do: p99 under 5 ms), and 1,000 idle connections cost a bounded, measured amount of memory each."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable

import orjson
import pytest

from gateway.apis.responses_ws import BATCH
from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream, Gate, Script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_responses_websocket import MESSAGES_PATH, ws_config
from tests.integration.test_responses_websocket_hostile import _masked, handshake
from tests.loop_probe import SWITCH_S, Health

FLOOD = 50_000
IDLE_CONNECTIONS = 1_000
LAG_P99_S = 0.005
GAUGE = "llm_gateway_websocket_connections"
BUSY = b'{"type":"error","code":"response_in_progress"'  # once an event (the nested `error` repeats the code)
BUSY_FRAME = 256  # bytes: the `response_in_progress` event's frame is ~230


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(ws_config(upstream))


class Reader(threading.Thread):
    """Reads everything the gateway sends on a raw socket, counting what the test waits for as it comes
    (in this thread: the counting is no work of the gateway's loop)."""

    WATCHED = (BUSY, b"response.output_text.delta", b"response.completed")

    def __init__(self, sock: socket.socket):
        super().__init__(daemon=True)
        self.sock = sock
        self.counts = dict.fromkeys(self.WATCHED, 0)

    def run(self) -> None:
        tail = b""
        try:
            while chunk := self.sock.recv(1 << 16):
                data = tail + chunk
                for what in self.WATCHED:  # a match across two reads is in `data` once: tail < len(what)
                    self.counts[what] += data.count(what) - tail.count(what)
                tail = data[-(len(BUSY) - 1):]
        except OSError:  # the test closed the socket
            return

    def count(self, what: bytes) -> int:
        return self.counts[what]


def poll(cond: Callable[[], bool], deadline_s: float) -> None:
    """Wait in the test's thread for a condition, bounded (the loop under measurement runs none of it)."""
    end = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < end, "the condition came true before the deadline"
        time.sleep(0.002)


@pytest.mark.xfail(strict=False, reason="open (issue #60, acceptance 4): on a quiet machine the flood ends in under "
                   "a second, and over its ~100-200 /healthz samples the p99 of the loop's own time is 15-42 ms (a "
                   "few stalls of ~30 ms each; under load, with ~1,300 samples, it read 2.8 ms): the bound is not met")
def test_a_flood_of_creates_while_one_runs_keeps_the_loop_serving(servers: LoopThread, upstream: FakeUpstream,
                                                                  gw: GatewayServer) -> None:
    gate = Gate()
    events = [a.message_start(), a.ping(), *a.text_block(0, ["F", "inished."]), a.message_delta(), a.message_stop()]
    upstream.enqueue(MESSAGES_PATH, Script([*(a.event(e) for e in events[:4]), gate,
                                            *(a.event(e) for e in events[4:])]))
    create = _masked(orjson.dumps({"type": "response.create", "model": "claude", "input": "x"}))
    flood = create * FLOOD
    sock = handshake(gw.port)
    reader = Reader(sock)
    reader.start()
    sock.sendall(create)
    poll(lambda: reader.count(b"response.output_text.delta") == 1, 10)  # the response now waits at the gate
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    gc.collect()
    gc.freeze()
    health = Health(gw.port, servers.cpu_time)
    try:
        health.start()
        poll(lambda: len(health.waits) >= 5, 10)
        t0 = time.monotonic()
        sock.sendall(flood)
        poll(lambda: reader.count(BUSY) == FLOOD, 60)
        t1 = time.monotonic()
        health.stop.set()
        health.join(20)
    finally:
        sys.setswitchinterval(switch)
        gc.unfreeze()
    gate.opened.set()
    poll(lambda: reader.count(b"response.completed") == 1, 10)
    sock.close()
    waits = sorted(c for s, w, c in health.waits if s <= t1 and s + w >= t0)
    assert len(waits) >= 10, "/healthz kept answering during the flood"
    p99 = waits[int(len(waits) * 0.99) - 1] if len(waits) >= 100 else waits[-1]
    print(f"flood of {FLOOD} creates: {t1 - t0:.2f} s; /healthz loop CPU p99 {p99 * 1000:.2f} ms, "
          f"max {waits[-1] * 1000:.2f} ms over {len(waits)}")
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
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(create)
    got = b""
    while b"response.output_text.delta" not in got:  # the response now waits at the gate
        chunk = sock.recv(65536)
        assert chunk, "the response started before the close"
        got += chunk
    sender = threading.Thread(target=_send_quietly, args=(sock, create * 60_000), daemon=True)  # 4 MiB
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
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    sender.join(10)
    gate.opened.set()
    servers.run(wait_until(lambda: gw.sample(GAUGE) == 0, 10))
    print(f"a flood the client does not read: {most} bytes buffered at most (high-water mark {high})")
    assert most <= high + BATCH * BUSY_FRAME


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:  # the test shut the socket down while the gateway was not reading
        return
