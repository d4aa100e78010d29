"""The Responses API's WebSocket mode (`GET /v1/responses` + `Upgrade: websocket`, docs/reference.md), driven
by the official openai SDK's WebSocket client (`client.responses.connect()`) against a scripted Anthropic
upstream (the bridge): three turns with `previous_response_id` and only new items, the upstream sent the
whole conversation each turn; the warm-up; refusals before the `101`; failover on a socket turn; one log
line per response with `transport: "websocket"`."""

from __future__ import annotations

import base64
import os
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import openai
import orjson
import pytest
import trustme
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import Close, FakeUpstream, Script, json_script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.redis_server import RedisServer

KEY = "gw-ws-key-0001"
SPENT_KEY = "gw-ws-key-spent"  # a budget of 0: every request refused
MESSAGES_PATH, SECOND_PATH = "/v1/messages", "/two/v1/messages"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
RETRY = {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(ws_config(upstream))


def ws_config(upstream: FakeUpstream, **server: Any) -> Any:
    return parse_config({
        "server": {"max_body_bytes": 64 * 1024, **server},
        "auth": {"keys": [{"name": "ws", "key": KEY}, {"name": "spent", "key": SPENT_KEY, "budget_usd": 0}]},
        "providers": {
            "claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
            "claude2": {"type": "anthropic", "base_url": upstream.base_url + "/two", "api_key": "sk-ant-SECRET2",
                        "timeouts": TIMEOUTS},
        },
        "models": [
            {"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]},
            {"name": "claude-pair", "retry": RETRY, "deployments": [
                {"provider": "claude", "model": "claude-dep"}, {"provider": "claude2", "model": "claude-dep2"}]},
            {"name": "claude-continued", "continuation": True, "retry": RETRY, "deployments": [
                {"provider": "claude", "model": "claude-dep"}, {"provider": "claude2", "model": "claude-dep2"}]},
        ],
    }, env={})


def sdk(gw: GatewayServer, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=20)


def ws_url(gw: GatewayServer, path: str = "/v1/responses") -> str:
    return f"ws://127.0.0.1:{gw.port}{path}"


def events_until_end(conn: Any) -> list[Any]:
    """One response's events, through its terminal event (or an error event)."""
    got = []
    for event in conn:
        got.append(event)
        if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
            return got
    return got


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_three_turns_send_only_new_items_and_the_bridge_gets_the_whole_conversation(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["One"]), a.text_stream(["Two"]), a.text_stream(["Three"]))
    with sdk(gw).responses.connect() as conn:
        conn.response.create(model="claude", input=[user("first")], generate=False)  # type: ignore[call-arg]
        warm = events_until_end(conn)
        assert [e.type for e in warm] == ["response.created", "response.completed"]
        previous = warm[-1].response.id
        answers = []
        for text in ("first", "second", "third"):
            items = [user(text)] if text != "first" else []
            conn.response.create(model="claude", input=items, previous_response_id=previous, store=False)
            got = events_until_end(conn)
            assert got[0].type == "response.created" and got[-1].type == "response.completed", got
            previous = got[-1].response.id
            answers.append(got[-1].response.output[0].content[0].text)
    assert answers == ["One", "Two", "Three"]
    sent = upstream.bodies(MESSAGES_PATH)
    assert len(sent) == 3
    texts = [[_text(m) for m in body["messages"]] for body in sent]
    assert texts[0] == ["first"]
    assert texts[1] == ["first", "One", "second"]
    assert texts[2] == ["first", "One", "second", "Two", "third"]


def test_a_response_cut_short_by_max_tokens_is_kept_and_continued(upstream: FakeUpstream, gw: GatewayServer) -> None:
    """`response.incomplete` (a `max_output_tokens` cut or a content filter) is a response the connection
    keeps, as OpenAI continues it: the next turn naming it gets the whole conversation upstream."""
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["One"], stop="max_tokens"), a.text_stream(["Two"]))
    with sdk(gw).responses.connect() as conn:
        conn.response.create(model="claude", input=[user("first")], store=False)
        got = events_until_end(conn)
        assert got[-1].type == "response.incomplete", got
        conn.response.create(model="claude", input=[user("go on")], previous_response_id=got[-1].response.id,
                             store=False)
        got = events_until_end(conn)
        assert got[-1].type == "response.completed", got
    texts = [[_text(m) for m in body["messages"]] for body in upstream.bodies(MESSAGES_PATH)]
    assert texts == [["first"], ["first", "One", "go on"]]


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def test_the_key_is_checked_before_the_upgrade_and_other_routes_keep_426(gw: GatewayServer) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(gw), additional_headers={"Authorization": "Bearer wrong"})
    assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as other:
        connect(ws_url(gw, "/v1/chat/completions"), additional_headers={"Authorization": f"Bearer {KEY}"})
    assert other.value.response.status_code == 426
    with pytest.raises(InvalidStatus) as page:  # a browser page of another site (no CORS origin allowed)
        connect(ws_url(gw), origin="https://evil.example", additional_headers={"Authorization": f"Bearer {KEY}"})
    assert page.value.response.status_code == 403


def test_a_keys_open_sockets_are_capped_and_the_upgrade_past_the_cap_gets_429(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """Each socket holds a conversation (up to `max_body_bytes`): one key opened as many as
    `max_connections` allowed. Past `server.websocket_max_per_key` the upgrade is refused, in OpenAI's
    shape, before any `101`; another key is not held back, and a socket closed gives its place back."""
    gw = make_gateway(ws_config(upstream, websocket_max_per_key=2))
    with ExitStack() as held:
        first = held.enter_context(raw_socket(gw))
        held.enter_context(raw_socket(gw))
        with pytest.raises(InvalidStatus) as refused:
            raw_socket(gw)
        answer = refused.value.response
        assert answer.status_code == 429
        assert orjson.loads(answer.body)["error"] == {
            "type": "rate_limit_error", "code": "websocket_limit_exceeded", "param": None,
            "message": "this key has 2 WebSocket connections open, the most the gateway allows "
                       "(server.websocket_max_per_key): close one, or use HTTP streaming"}
        assert gw.sample("llm_gateway_http_refused_total", reason="websocket_limit") == 1
        with raw_socket(gw, Authorization=f"Bearer {SPENT_KEY}"):  # another key's count is its own
            pass
        first.close()
        servers.run(wait_until(lambda: gw.sample("llm_gateway_websocket_connections") == 1))
        held.enter_context(raw_socket(gw))  # the closed one's place


def raw_socket(gw: GatewayServer, **headers: str) -> Any:
    return connect(ws_url(gw), additional_headers={"Authorization": f"Bearer {KEY}", **headers}, max_size=None)


def recv_json(ws: Any) -> dict[str, Any]:
    return dict(orjson.loads(ws.recv(timeout=10)))


def test_bad_input_gets_an_error_event_and_the_connection_stays_usable(upstream: FakeUpstream,
                                                                      gw: GatewayServer) -> None:
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["Fine"]))
    with raw_socket(gw) as ws:
        ws.send("not json")
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "invalid_request"
        ws.send(orjson.dumps({"type": "response.create", "model": "nope", "input": "hi"}).decode())
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "model_not_found" and err["status"] == 404
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "hi"}).decode())
        types = []
        while not types or types[-1] not in ("response.completed", "error"):
            types.append(recv_json(ws)["type"])
    assert types[0] == "response.created" and types[-1] == "response.completed"


@pytest.mark.parametrize("depth", [130, 300])
def test_a_message_nested_too_deep_is_an_error_event_and_the_connection_stays_usable(
        upstream: FakeUpstream, gw: GatewayServer, depth: int) -> None:
    """The serve path takes the message's parsed body, held to the nesting bound of an HTTP body (128
    levels); past the 254 levels orjson writes, the body is refused before it is re-serialised."""
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["Fine"]))
    deep = "[" * depth + "]" * depth
    with raw_socket(gw) as ws:
        ws.send('{"type": "response.create", "model": "claude", "input": "hi", "metadata": {"x": ' + deep + "}}")
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "invalid_request" and "nested" in err["message"], err
        assert turn(ws, {"model": "claude", "input": "hi"})[-1]["type"] == "response.completed"
    assert len(upstream.bodies(MESSAGES_PATH)) == 1


def turn(ws: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Send one `response.create`; its events through the terminal or error event."""
    ws.send(orjson.dumps({"type": "response.create", **body}).decode())
    got: list[dict[str, Any]] = []
    while not got or got[-1]["type"] not in ("response.completed", "response.failed", "response.incomplete",
                                             "error"):
        got.append(recv_json(ws))
    return got


def output_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def cut_after_first_token() -> Script:
    events = [a.message_start("msg_first"), *a.text_block(0, ["One, ", "two, "])[:-1]]  # the block stays open
    return Script([a.event(e) for e in events] + [Close()])


def test_inband_overload_before_the_first_token_is_retried_invisibly(upstream: FakeUpstream,
                                                                    gw: GatewayServer) -> None:
    upstream.enqueue(MESSAGES_PATH, a.stream([a.message_start(), a.error_event()]))
    upstream.enqueue(SECOND_PATH, a.text_stream(["From ", "the second."]))
    with raw_socket(gw) as ws:
        events = turn(ws, {"model": "claude-pair", "input": "hi"})
    types = [e["type"] for e in events]
    assert types.count("response.created") == 1 and types[-1] == "response.completed" and "error" not in types
    assert output_text(events) == "From the second."
    assert len(upstream.bodies(MESSAGES_PATH)) == 1 and len(upstream.bodies(SECOND_PATH)) == 1


def test_a_cut_after_the_first_token_is_continued_with_continuation_on(upstream: FakeUpstream,
                                                                      gw: GatewayServer) -> None:
    upstream.enqueue(MESSAGES_PATH, cut_after_first_token())
    upstream.enqueue(SECOND_PATH, a.text_stream([" three, ", "four, five."]))
    with raw_socket(gw) as ws:
        events = turn(ws, {"model": "claude-continued", "input": "count"})
    assert events[-1]["type"] == "response.completed"
    assert output_text(events) == "One, two, three, four, five."
    assert gw.sample("llm_gateway_continuations_total", outcome="ok") == 1


def test_a_cut_without_continuation_is_one_error_event_and_the_socket_serves_the_next_turn(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(MESSAGES_PATH, cut_after_first_token(), a.text_stream(["Again."]))
    with raw_socket(gw) as ws:
        events = turn(ws, {"model": "claude-pair", "input": "count"})
        assert [e["type"] for e in events].count("error") == 1 and events[-1]["type"] == "error"
        assert output_text(events) == "One, two, "
        again = turn(ws, {"model": "claude", "input": "count"})
    assert again[-1]["type"] == "response.completed" and output_text(again) == "Again."


def test_a_warmup_is_refused_as_a_response_would_be(upstream: FakeUpstream, gw: GatewayServer) -> None:
    with raw_socket(gw) as ws:
        ws.send(orjson.dumps({"type": "response.create", "model": "nope", "generate": False}).decode())
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "model_not_found" and err["status"] == 404
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "generate": False}).decode())
        assert [recv_json(ws)["type"] for _ in range(2)] == ["response.created", "response.completed"]
    assert upstream.bodies(MESSAGES_PATH) == []


def test_a_warmup_past_the_keys_budget_is_refused_as_a_response_would_be(gw: GatewayServer) -> None:
    """A warm-up spends nothing, but a key past its budget is told so at once, not only at its first real
    turn: the connection would look healthy when no response can run on it."""
    with raw_socket(gw, Authorization=f"Bearer {SPENT_KEY}") as ws:
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "generate": False}).decode())
        err = recv_json(ws)
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "hi"}).decode())
        refused = recv_json(ws)  # a response, refused as its HTTP request is: 429 with its fields
    assert (err["type"], err["code"], err["status"]) == ("error", "budget_exceeded", 429)
    for event in (err, refused):  # when the period resets, and that an SDK should not retry before then
        assert event["code"] == "budget_exceeded" and event["error"]["type"] == "insufficient_quota", event
        assert int(event["headers"]["retry-after"]) > 0 and event["headers"]["x-should-retry"] == "false", event


def test_warmups_cannot_grow_the_kept_conversation_past_max_body_bytes(upstream: FakeUpstream,
                                                                        gw: GatewayServer) -> None:
    """A warm-up is kept like a response, so it is held to the same bound: a chain of free warm-ups, each
    naming the last, would otherwise grow what the connection keeps without end (64 KiB here)."""
    big = "z" * 40_000  # two of these outgrow the 64 KiB limit
    with raw_socket(gw) as ws:
        first = turn(ws, {"model": "claude", "input": big, "generate": False})
        assert first[-1]["type"] == "response.completed"
        refused = turn(ws, {"model": "claude", "input": big, "generate": False,
                            "previous_response_id": first[-1]["response"]["id"]})
        assert refused == [refused[-1]] and refused[-1]["code"] == "request_too_large" and refused[-1]["status"] == 413
        # the first warm-up is still the one kept: a small turn continues from it
        again = turn(ws, {"model": "claude", "input": "x", "generate": False,
                          "previous_response_id": first[-1]["response"]["id"]})
        assert again[-1]["type"] == "response.completed"
    assert upstream.bodies(MESSAGES_PATH) == []


def test_a_warmup_nested_too_deep_is_an_error_event_and_the_connection_stays_usable(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    """Past the 254 levels orjson writes, a warm-up's body (echoed in its events, and counted as kept) cannot be
    written: an `invalid_request` error event, as for a response, not an internal error that closes with 1011."""
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["Fine"]))
    deep = "[" * 300 + "]" * 300
    with raw_socket(gw) as ws:
        ws.send('{"type": "response.create", "generate": false, "model": "claude", "metadata": {"x": ' + deep + "}}")
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "invalid_request" and "nested" in err["message"], err
        assert turn(ws, {"model": "claude", "input": "hi"})[-1]["type"] == "response.completed"


def test_warmups_are_held_to_a_bodys_container_and_nesting_bounds(upstream: FakeUpstream,
                                                                    make_gateway: Callable[..., GatewayServer]) -> None:
    """The conversation a warm-up leaves is kept as a response's is, so it is held to an HTTP body's bounds
    (250,000 arrays and objects, 128 levels), the kept items counted: each message under the container bound,
    a chain of warm-ups would otherwise keep ~20 times that many (a 10 MiB conversation of empty arrays,
    ~220 MB of Python objects), for no model call."""
    gw = make_gateway(ws_config(upstream, max_body_bytes=2 * 1024 * 1024))
    many = orjson.dumps({"type": "response.create", "model": "claude", "generate": False,
                         "metadata": {}, "input": [{"type": "message", "role": "user", "content": [[]] * 200_000}]})
    with raw_socket(gw) as ws:
        ws.send(many.decode())
        first = [recv_json(ws), recv_json(ws)]
        assert first[-1]["type"] == "response.completed"
        again = orjson.loads(many)
        again["previous_response_id"] = first[-1]["response"]["id"]
        ws.send(orjson.dumps(again).decode())
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "invalid_request" and "250000" in err["message"], err
        deep = "[" * 130 + "]" * 130  # past the body's 128 levels, short of what orjson cannot write
        ws.send('{"type": "response.create", "generate": false, "model": "claude", "metadata": {"x": ' + deep + "}}")
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "invalid_request" and "nested" in err["message"], err
    assert upstream.bodies(MESSAGES_PATH) == []


def tls_files(tmp_path: Any) -> tuple[trustme.CA, dict[str, str]]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return ca, {"cert_file": str(cert), "key_file": str(key)}


def test_websocket_mode_over_tls(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                                 tmp_path: Any) -> None:
    ca, tls = tls_files(tmp_path)
    gw = make_gateway(ws_config(upstream, tls=tls))
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["Private."]))
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    with connect(f"wss://127.0.0.1:{gw.port}/v1/responses", ssl=ctx,
                 additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        events = turn(ws, {"model": "claude", "input": "hi"})
    assert events[-1]["type"] == "response.completed" and output_text(events) == "Private."


def test_a_close_the_gateway_starts_over_tls_ends_when_the_client_answers(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], tmp_path: Any) -> None:
    """TLS cannot half-close, so a close the gateway began (idle, drain, a revoked key) waited its whole
    5 s linger: the client answered the close frame and waited, as RFC 6455 has it, for the server to end
    the connection. The TLS shutdown is now the linger: the client's answer ends it at once."""
    ca, tls = tls_files(tmp_path)
    gw = make_gateway(ws_config(upstream, websocket_idle_s=1, tls=tls))
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", gw.port), timeout=10),
                         server_hostname="127.0.0.1") as sock:
        nonce = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(f"GET /v1/responses HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n"
                     f"Authorization: Bearer {KEY}\r\n\r\n".encode())
        got = b""
        while b"idle timeout" not in got:  # the 101, then the gateway's close frame (1000) after a second idle
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk
        assert got[got.index(b"\r\n\r\n") + 4:][:4] == b"\x88\x0e\x03\xe8"
        sock.sendall(b"\x88\x82\x00\x00\x00\x00\x03\xe8")  # the client's answer: a masked close frame, 1000
        sock.settimeout(3)  # the old code's close came after 5 s: TimeoutError
        assert sock.recv(65536) == b""  # the gateway's close_notify: the end, at once


def test_each_turn_is_held_to_the_keys_limits(upstream: FakeUpstream,
                                              make_gateway: Callable[..., GatewayServer]) -> None:
    raw = {"auth": {"keys": [{"name": "ws", "key": KEY, "rpm": 1}]},
           "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET"}},
           "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]}]}
    gw = make_gateway(parse_config(raw, env={}))
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["First."]))
    with raw_socket(gw) as ws:
        assert turn(ws, {"model": "claude", "input": "one"})[-1]["type"] == "response.completed"
        limited = turn(ws, {"model": "claude", "input": "two"})
        assert limited[-1]["code"] == "rate_limit_exceeded" and limited[-1]["status"] == 429
        # the wait HTTP's `Retry-After` gives, in the event's `headers` (where Codex reads it), and the body's type
        assert int(limited[-1]["headers"]["retry-after"]) >= 1, limited[-1]
        assert limited[-1]["error"]["type"] == "rate_limit_error"
        ws.send(orjson.dumps({"type": "response.create", "model": "nope", "input": "x"}).decode())
        assert recv_json(ws)["type"] == "error"  # the socket stays usable after a refusal
    assert len(upstream.bodies(MESSAGES_PATH)) == 1


def test_a_turn_sent_on_the_last_ones_end_waits_for_its_accounts_instead_of_being_refused(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """Codex sends its next `response.create` as soon as it reads `response.completed`; the response's task
    still settles its accounts then. That message got `response_in_progress` when it came before the
    settlement ended (seen in CI under load, where the task's last step waited one loop turn). Here the
    settlement is held for certain: Redis, which keeps the key's tpm window, stops answering during the
    first turn. The second turn now waits for the first's end and is served."""
    with RedisServer() as redis:
        # tpm: the turn's real usage settles its reservation in Redis after its end, the wait held here
        raw = {"auth": {"keys": [{"name": "ws", "key": KEY, "tpm": 1_000_000}]},
               "state": {"backend": "redis", "redis_url": redis.url, "timeout_ms": 1000},
               "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-X"}},
               "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]}]}
        gw = make_gateway(parse_config(raw, env={}))
        upstream.enqueue(MESSAGES_PATH, a.text_stream(["First."]))
        upstream.enqueue(MESSAGES_PATH, a.text_stream(["Second."]))
        with raw_socket(gw) as ws:
            ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "one"}).decode())
            assert recv_json(ws)["type"] == "response.created"  # admitted: its rate window counted in Redis
            redis.pause()  # the settlement, after the terminal event, waits on Redis (up to 1 s, then local)
            try:
                first: list[dict[str, Any]] = []
                while not first or first[-1]["type"] != "response.completed":
                    first.append(recv_json(ws))
                second = turn(ws, {"model": "claude", "input": "two"})
            finally:
                redis.resume()
        assert second[-1]["type"] == "response.completed", second[-1]
        assert output_text(second) == "Second."


def test_input_redaction_masks_each_turn_and_keeps_the_clients_own_history(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """The serve path takes the message's parsed body (no second parse), but input redaction masks a copy:
    the history the connection keeps stays the client's own text, so each turn is judged and masked as its
    HTTP twin, which resends it (an input webhook is sent the prompt masked, as the provider gets it)."""
    raw = {"auth": {"keys": [{"name": "ws", "key": KEY}]},
           "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET"}},
           "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}],
                       "redaction": "in", "guardrails": ["hook"]}],
           "redaction": {"profiles": {"in": {"rules": [], "inputs": True,
                                             "custom": [{"name": "ticket", "pattern": "ACME-[0-9]{6}"}]}}},
           "guardrails": [{"name": "hook", "type": "webhook", "url": f"{upstream.base_url}/guard", "timeout_s": 2,
                           "stage": "input"}]}
    gw = make_gateway(parse_config(raw, env={}))
    upstream.defaults["/guard"] = json_script({"allow": True})
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["One"]), a.text_stream(["Two"]))
    with raw_socket(gw) as ws:
        first = turn(ws, {"model": "claude", "input": [user("ticket ACME-123456")], "store": False})
        assert first[-1]["type"] == "response.completed", first
        second = turn(ws, {"model": "claude", "input": [user("and now?")], "store": False,
                           "previous_response_id": first[-1]["response"]["id"]})
        assert second[-1]["type"] == "response.completed", second
    judged = [str(body) for body in upstream.bodies("/guard")]
    assert len(judged) == 2 and all("ACME-123456" not in j and "[REDACTED:ticket]" in j for j in judged), judged
    texts = [[_text(m) for m in body["messages"]] for body in upstream.bodies(MESSAGES_PATH)]
    assert texts == [["ticket [REDACTED:ticket]"], ["ticket [REDACTED:ticket]", "One", "and now?"]]


def test_the_markers_a_kept_conversation_carries_are_fitted_on_every_turn(upstream: FakeUpstream,
                                                                           gw: GatewayServer) -> None:
    """What the scans of a kept conversation found travels with it (`core.json_body.Scan`): a turn whose
    new items carry no cache marker still has the kept ones fitted to Anthropic's four breakpoints."""
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["One"]), a.text_stream(["Two"]))
    marked = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}]} for i in range(5)]
    with raw_socket(gw) as ws:
        first = turn(ws, {"model": "claude", "input": marked, "store": False})
        second = turn(ws, {"model": "claude", "input": [user("and now?")], "store": False,
                           "previous_response_id": first[-1]["response"]["id"]})
    assert second[-1]["type"] == "response.completed", second
    breakpoints = [sum(1 for m in body["messages"] if isinstance(m["content"], list)
                       for block in m["content"] if "cache_control" in block)
                   for body in upstream.bodies(MESSAGES_PATH)]
    assert breakpoints == [4, 4]


@pytest.fixture
def roomy_upstream(servers: LoopThread) -> Iterator[FakeUpstream]:
    """A fake upstream taking bodies up to 8 MiB."""
    up = FakeUpstream()
    up.max_body = 8 * 1024 * 1024
    servers.run(up.start())
    yield up
    servers.run(up.stop())


def test_a_big_message_is_read_in_steps_as_a_small_one_is_read_whole(
        roomy_upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """A message over 1 MiB is checked and parsed in steps (`core.utf8_check`, `core.json_split`): not JSON,
    an error event and the connection serves the next; its long text reaches the upstream exactly, on its
    turn and on the next one that continues it; text that is not UTF-8 closes the connection with 1007."""
    upstream = roomy_upstream
    gw = make_gateway(ws_config(upstream, max_body_bytes=4 * 1024 * 1024))
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["One"]), a.text_stream(["Two"]))
    big = 'é\n"中😀\\' * 150_000  # ~2 MiB of JSON
    with raw_socket(gw) as ws:
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": big}).decode()[:-1])
        err = recv_json(ws)
        assert err["type"] == "error" and err["message"] == "the message is not JSON", err
        first = turn(ws, {"model": "claude", "input": [user(big)], "store": False})
        second = turn(ws, {"model": "claude", "input": [user("and now?")], "store": False,
                           "previous_response_id": first[-1]["response"]["id"]})
        assert output_text(first) == "One" and output_text(second) == "Two"
        ws.send(b'{"type": "response.create", "input": "' + b"\xff" * (2 * 1024 * 1024) + b'"}', text=True)
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    texts = [[_text(m) for m in body["messages"]] for body in upstream.bodies(MESSAGES_PATH)]
    assert texts == [[big], [big, "One", "and now?"]]
