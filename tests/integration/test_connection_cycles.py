"""A connection that ended leaves no reference cycle behind: its objects are freed as it closes, by
reference counting, not left for the cyclic collector (whose collections pause every stream, and whose
work grows with the connections served: docs/reference.md, "WebSocket mode").

What made cycles before: llhttp's parser holding the request reader's callbacks (every HTTP connection);
the exception that marks an upgrade request as the last one, named in a frame its traceback holds; a
WebSocket session and its connection holding each other; the WebSocket protocol's parser, a generator
holding the protocol that holds it."""

from __future__ import annotations

import gc
import socket
from collections.abc import Callable, Iterator

import pytest

from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_responses_websocket import MESSAGES_PATH, raw_socket, turn, ws_config
from tests.integration.test_responses_websocket_hostile import handshake, read_to_close

OURS = {"HttpConnection", "RequestReader", "ResponsesSocket", "ServerSocket", "Conversation", "_Saturated",
        "Protocol"}


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The cyclic collector off while the test runs: no cycle is freed before the test looks for it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def uncollectable_but_for_the_collector() -> set[str]:
    """Which of our types only the cyclic collector could free now."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return {type(o).__name__ for o in gc.garbage} & OURS
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def closed(servers: LoopThread, gw: GatewayServer) -> None:
    servers.run(wait_until(lambda: gw.api.open_count() == 0, 10))


def test_http_and_websocket_connections_leave_no_cycles(servers: LoopThread, upstream: FakeUpstream,
                                                        make_gateway: Callable[..., GatewayServer],
                                                        collector_off: None) -> None:
    gw = make_gateway(ws_config(upstream))
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["Fine"]))
    with raw_socket(gw) as ws:  # a session with a response on it, closed by the client
        assert turn(ws, {"model": "claude", "input": "hi"})[-1]["type"] == "response.completed"
    for _ in range(3):  # plain requests, each on a connection of its own
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
            assert read_to_close(sock).startswith(b"HTTP/1.1 200 ")
    sock = handshake(gw.port)  # a session the client drops without a close frame
    sock.close()
    closed(servers, gw)
    left = uncollectable_but_for_the_collector()
    assert not left, f"left to the cyclic collector: {sorted(left)}"
