"""A WebSocket-mode connection's log lines (docs/reference.md, "WebSocket mode"): `websocket_opened` and
`websocket_closed` frame its responses' `request` lines, a response the client's leaving cut included:
that one's line (`outcome: cancelled`) comes before the connection's last line, which counts it."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from structlog.testing import capture_logs
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream, Hang
from tests.harness import GatewayServer, LoopThread, wait_until

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
