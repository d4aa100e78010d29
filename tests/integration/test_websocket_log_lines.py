"""A WebSocket-mode connection's log lines (docs/reference.md, "WebSocket mode"): `websocket_opened` and
`websocket_closed` frame its responses' `request` lines, a response the client's leaving cut included:
that one's line (`outcome: cancelled`) comes before the connection's last line, which counts it."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from gateway.config import parse_config
from gateway.observe.metrics_labels import WEBSOCKET_REFUSED_REASONS
from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream, Hang
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_responses_websocket import KEY as WS_KEY
from tests.integration.test_responses_websocket import MESSAGES_PATH, raw_socket, recv_json, turn, ws_config

KEY = "gw-ws-log-key"


def test_a_response_cut_by_the_clients_leaving_is_logged_inside_the_connections_lines(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(parse_config({
        "auth": {"keys": [{"name": "ws", "key": KEY}]},
        "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                                 "timeouts": {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}}},
        "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]}],
    }, env={}))
    upstream.enqueue(a.PATH, a.stream([a.message_start(), a.ping()], tail=[Hang()]))
    with capture_logs() as logs:
        with connect(f"ws://127.0.0.1:{gw.port}/v1/responses",
                     additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "hi"}).decode())
            servers.run(wait_until(lambda: len(upstream.bodies(a.PATH)) == 1, 5.0))
        servers.run(wait_until(lambda: {"request", "websocket_closed"} <= {e["event"] for e in logs}, 5.0))
    events = [e["event"] for e in logs if e["event"] in ("websocket_opened", "request", "websocket_closed")]
    assert events == ["websocket_opened", "request", "websocket_closed"]
    (line,) = [e for e in logs if e["event"] == "request"]
    assert (line["transport"], line["outcome"], line["status"]) == ("websocket", "cancelled", 499)
    (closed,) = [e for e in logs if e["event"] == "websocket_closed"]
    assert closed["responses"] == 1 and closed["key"] == "ws"


def test_an_upgrade_refused_for_its_caller_leaves_one_line(make_gateway: Callable[..., GatewayServer],
                                                           upstream: FakeUpstream) -> None:
    """A guessed key over WebSocket leaves a trace, as over HTTP: one `websocket_refused` line, no credential."""
    gw = make_gateway(parse_config({
        "auth": {"keys": [{"name": "ws", "key": KEY}]},
        "providers": {"up": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-up"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}]}],
    }, env={}))
    with capture_logs() as logs, pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{gw.port}/v1/responses",
                additional_headers={"Authorization": "Bearer gw-guessed-SECRET"}).close()
    assert refused.value.response.status_code == 401
    (line,) = [e for e in logs if e["event"] == "websocket_refused"]
    assert (line["status"], line["code"]) == (401, "invalid_api_key") and line["request_id"]
    assert "gw-guessed-SECRET" not in str(logs)


def test_every_upgrade_refused_is_counted_by_its_reason(servers: LoopThread, upstream: FakeUpstream,
                                                        make_gateway: Callable[..., GatewayServer]) -> None:
    """`llm_gateway_websocket_refused_total{reason}`: each refusal before the `101`, by why; the ones the
    gateway logs as its caller's (`websocket_refused`) name the reason too."""
    gw = make_gateway(ws_config(upstream, websocket_max_per_key=1))
    url, auth = f"ws://127.0.0.1:{gw.port}", {"Authorization": f"Bearer {WS_KEY}"}
    statuses = []
    with capture_logs() as logs:
        for path, headers, origin in (("/v1/responses", {"Authorization": "Bearer gw-guessed"}, None),
                                      ("/v1/chat/completions", auth, None),
                                      ("/v1/responses", auth, "https://evil.example")):
            with pytest.raises(InvalidStatus) as refused:
                connect(url + path, additional_headers=headers, origin=origin)
            statuses.append(refused.value.response.status_code)
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:  # no Sec-WebSocket-Key
            sock.sendall(f"GET /v1/responses HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         f"Authorization: Bearer {WS_KEY}\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head:
                got = sock.recv(4096)
                assert got, "closed before a status line"
                head += got
            statuses.append(int(head.split(b" ", 2)[1]))
        with connect(url + "/v1/responses", additional_headers=auth):
            with pytest.raises(InvalidStatus) as refused:
                connect(url + "/v1/responses", additional_headers=auth)
            statuses.append(refused.value.response.status_code)
    assert statuses == [401, 426, 403, 400, 429]
    counted = {r: gw.sample("llm_gateway_websocket_refused_total", reason=r) for r in WEBSOCKET_REFUSED_REASONS}
    assert counted == {"auth": 1, "upgrade_required": 1, "origin": 1, "handshake": 1, "websocket_limit": 1,
                       "permission_denied": 0}
    assert [e["reason"] for e in logs if e["event"] == "websocket_refused"] == ["auth", "origin", "handshake"]


def refused_lines(logs: list[Any]) -> list[Any]:
    return [e for e in logs if e["event"] == "request" and e["status"] in (400, 413)]


MESSAGES = {  # a message refused before it became a response: what it was, its status and code
    "not JSON": ("not json {", 400, "invalid_request"),
    "another type": (orjson.dumps({"type": "session.update", "model": "claude"}).decode(), 400, "invalid_request"),
    "nested too deep": ('{"type": "response.create", "model": "claude", "input": "hi", "metadata": {"x": '
                        + "[" * 300 + "]" * 300 + "}}", 400, "invalid_request"),
}


@pytest.mark.parametrize("case", sorted(MESSAGES))
def test_a_message_refused_before_its_response_has_its_line_and_count(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], case: str) -> None:
    """As an HTTP request refused before its model resolved: one `request` line (the connection's key, no model,
    nothing of the message) inside the connection's lines, and `llm_gateway_requests_total` with model
    `unknown`; the connection serves on."""
    gw = make_gateway(ws_config(upstream))
    text, status, code = MESSAGES[case]
    with capture_logs() as logs:
        with raw_socket(gw) as ws:
            ws.send(text)
            assert recv_json(ws)["code"] == code
        servers.run(wait_until(lambda: any(e["event"] == "websocket_closed" for e in logs), 5.0))
    assert [e["event"] for e in logs if e["event"].startswith(("websocket", "request"))] == [
        "websocket_opened", "request", "websocket_closed"]
    (line,) = refused_lines(logs)
    assert (line["transport"], line["status"], line["reason"], line["outcome"]) == (
        "websocket", status, code, "client_error")
    assert (line["key"], line["model"], line["api"], line["requested_model"]) == ("ws", "(unresolved)", "responses",
                                                                                  None)
    assert "claude" not in str(line) and "session.update" not in str(line)
    assert gw.sample("llm_gateway_requests_total", api="responses", model="unknown", outcome="client_error",
                     key="ws") == gw.sample("llm_gateway_requests_total") == 1


def test_a_conversation_too_large_and_an_oversized_message_have_their_lines_and_counts(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """The whole request over `server.max_body_bytes` (an `error` event 413), then a message over it (closed
    with 1009): each 413 `request_too_large`, one line and one count."""
    gw = make_gateway(ws_config(upstream))  # max_body_bytes: 64 KiB
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["ok"]))
    big = "z" * 40_000  # two of these outgrow the bound
    with capture_logs() as logs:
        with raw_socket(gw) as ws:
            first = turn(ws, {"model": "claude", "input": big})
            refused = turn(ws, {"model": "claude", "input": big, "previous_response_id": first[-1]["response"]["id"]})
            assert refused[-1]["code"] == "request_too_large"
            ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "x" * 70_000}).decode())
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        servers.run(wait_until(lambda: any(e["event"] == "websocket_closed" for e in logs), 5.0))
    lines = refused_lines(logs)
    assert [(e["status"], e["reason"], e["transport"], e["key"]) for e in lines] == [
        (413, "request_too_large", "websocket", "ws")] * 2
    assert big not in str(lines)
    closing = next(e for e in logs if e["event"] == "websocket_closed")
    assert closing["responses"] == 1 and closing["close_code"] == 1009  # the refused are no responses
    requests = "llm_gateway_requests_total"
    assert gw.sample(requests, api="responses", model="unknown", outcome="client_error", key="ws") == 2
    assert gw.sample(requests, api="responses", model="claude", outcome="ok") == 1
