"""A hostile upstream on loopback against the real gateway, driven by the official `openai` SDK: odd statuses,
interim floods, smuggling framing, a gzip bomb, and error messages that echo our own credentials.

The upstream is a raw asyncio server (aiohttp would refuse to write most of these answers): it answers
every request with `answer` until a test sets `good`, then with a valid answer, and counts the requests
each TCP connection carried (a connection the gateway must not reuse carries one)."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import openai
import orjson
import pytest
from structlog.testing import capture_logs

from tests.chat_scripts import MODEL, chunk
from tests.fake_upstream import sse
from tests.harness import GatewayServer, LoopThread, parse_config

# bounds answer times and peak memory: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

MESSAGES = [{"role": "user", "content": "hi"}]
PROVIDER_KEY = "sk-proj-HOSTILEupstreamKEY0123456789abcdef"
BEARER = "tok.QuietlyEchoed-9f8e7d6c5b4a"


def chunked(body: bytes, piece: int = 64 * 1024) -> bytes:
    """RFC 9112 §7.1 framing of `body`."""
    out = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + piece]), body[i:i + piece]) for i in range(0, len(body), piece))
    return out + b"0\r\n\r\n"


def good_answer(stream: bool) -> bytes:
    if stream:
        events = sse(chunk({"role": "assistant", "content": ""})) + sse(chunk({"content": "fine"})) + \
            sse(chunk({}, "stop")) + b"data: [DONE]\n\n"
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + \
            chunked(events)
    body = orjson.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": MODEL,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"},
                                      "finish_reason": "stop"}]})
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class Hostile:
    def __init__(self, answer: bytes):
        self.answer = answer
        self.good = False
        self.per_conn: list[int] = []  # requests each accepted connection carried
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = len(self.per_conn)
        self.per_conn.append(0)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = orjson.loads(await reader.readexactly(length))
                self.per_conn[conn] += 1
                writer.write(good_answer(bool(body.get("stream"))) if self.good else self.answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


Start = Callable[[bytes], tuple[Hostile, GatewayServer]]


@pytest.fixture
def start_hostile(servers: LoopThread) -> Iterator[Start]:
    made: list[tuple[Hostile, GatewayServer]] = []

    def start(answer: bytes) -> tuple[Hostile, GatewayServer]:
        up = Hostile(answer)
        servers.run(up.start())
        gw = GatewayServer(parse_config({
            "auth": {"allow_unauthenticated": True},
            "providers": {"up": {"type": "openai", "base_url": f"http://127.0.0.1:{up.port}/v1",
                                 "api_key": PROVIDER_KEY,
                                 "timeouts": {"connect_s": 2, "first_token_s": 20, "idle_s": 20, "total_s": 60}}},
            "models": [{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}],
                        "retry": {"initial_backoff_ms": 1, "max_backoff_ms": 5}}],
        }, env={}))
        servers.run(gw.start())
        made.append((up, gw))
        return up, gw

    yield start
    for up, gw in made:
        servers.run(gw.stop())
        servers.run(up.stop())


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)


def ask(c: openai.OpenAI, stream: bool) -> str:
    if stream:
        return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="m", messages=MESSAGES, stream=True) if ch.choices)
    return c.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content or ""


def expect_502(c: openai.OpenAI, stream: bool) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as err:
        ask(c, stream)
    assert err.value.status_code == 502
    assert err.value.response.json()["error"]["code"] == "upstream_error"
    return err.value


LENGTH_BODY = b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
ODD = {
    "204": b"HTTP/1.1 204 No Content\r\n\r\n",
    "204-with-length": b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n{}",
    "304": b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
    "201": b"HTTP/1.1 201 Created\r\n" + LENGTH_BODY,
    "302": b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\n" + LENGTH_BODY,
    "101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    "102": b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\n" + LENGTH_BODY,
    "100-flood": b"HTTP/1.1 100 Continue\r\n\r\n" * 50_000,
}


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("name", list(ODD))
def test_an_unexpected_status_is_a_502_and_the_client_connection_stays_in_sync(
        start_hostile: Start, name: str, stream: bool) -> None:
    up, gw = start_hostile(ODD[name])
    c = client(gw)
    began = time.monotonic()
    expect_502(c, stream)
    assert time.monotonic() - began < 5, "failed at once, not after total_s"
    assert up.per_conn and sum(up.per_conn) >= 1
    up.good = True
    assert ask(c, stream) == "fine", "the same client (its kept-alive connection) reads the next answer"


def test_content_length_with_transfer_encoding_fails_and_is_never_reused(start_hostile: Start) -> None:
    body = good_answer(False).split(b"\r\n\r\n", 1)[1]
    smuggle = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" % len(body)) + chunked(body)
    up, gw = start_hostile(smuggle)
    c = client(gw)
    expect_502(c, False)
    attempts = sum(up.per_conn)
    assert attempts >= 2, "retried like a malformed answer"
    assert up.per_conn == [1] * attempts, "each attempt on a connection of its own"
    up.good = True
    assert ask(c, False) == "fine"
    assert up.per_conn == [1] * (attempts + 1), "the good answer came on a new connection too"


def echo(status: int) -> bytes:
    body = orjson.dumps({"error": {
        "message": f"Incorrect API key provided: {PROVIDER_KEY}. We saw Authorization: Bearer {BEARER}",
        "type": "invalid_request_error", "param": f"Bearer {BEARER}", "code": f"bad_{PROVIDER_KEY}"}})
    return b"HTTP/1.1 %d Oops\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status, len(body), body)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("status", [400, 401])
def test_an_error_echoing_our_credentials_never_shows_them(start_hostile: Start, status: int,
                                                           stream: bool) -> None:
    _, gw = start_hostile(echo(status))
    with capture_logs() as logs:
        with pytest.raises(openai.APIStatusError) as err:
            ask(client(gw), stream)
        deadline = time.monotonic() + 10  # the request line is logged just after the response
        while not [e for e in logs if e["event"] == "request"] and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [e for e in logs if e["event"] == "request"], "the request was logged"
    assert err.value.status_code == (400 if status == 400 else 502)
    seen = err.value.response.text + str(err.value) + str(err.value.response.headers) + str(logs)
    assert PROVIDER_KEY not in seen and BEARER not in seen and "HOSTILEupstream" not in seen
    if status == 400:  # passed through (CONTRACT §4.2), with the provider's reason, masked
        message = err.value.response.json()["error"]["message"]
        assert message.startswith("Incorrect API key provided: [REDACTED:")
        assert "Bearer [REDACTED:" in message


def bomb() -> bytes:
    """128 MiB of zeros as gzip: about 128 KiB on the wire."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    return b"".join(z.compress(block) for _ in range(128)) + z.flush()


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_a_gzip_bomb_is_inflated_within_bounds(start_hostile: Start, stream: bool) -> None:
    data = bomb()
    assert len(data) < 1024 * 1024
    kind = b"text/event-stream" if stream else b"application/json"
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
              % (kind, len(data))) + data
    up, gw = start_hostile(answer)
    c = client(gw)
    tracemalloc.start()
    try:
        expect_502(c, stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the non-stream bound is MAX_BODY_BYTES (32 MiB), the stream one an SSE event (8 MiB); unbounded
    # inflation of one 64 KiB read alone is 64 MiB, of the whole answer 128 MiB
    assert peak < 48 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"
    up.good = True
    assert ask(c, stream) == "fine"
