"""The gateway's own HTTP/1.1 upstream client against real servers: TLS with certificate checks,
compressed bodies, bodies framed by length or by the connection's end, and broken responses."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Iterator

import openai
import pytest
import trustme

from tests.chat_scripts import MODEL, text_stream
from tests.fake_upstream import FakeUpstream, Script
from tests.harness import GatewayServer, LoopThread, gateway_config

PATH = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_upstream(servers: LoopThread, ca: trustme.CA) -> Iterator[FakeUpstream]:
    import ssl

    up = FakeUpstream()
    up.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(up.tls)
    servers.run(up.start())
    yield up
    servers.run(up.stop())


def start(servers: LoopThread, base_url: str) -> GatewayServer:
    gw = GatewayServer(gateway_config(base_url))
    servers.run(gw.start())
    return gw


def test_tls_upstream_with_a_trusted_certificate(servers: LoopThread, tls_upstream: FakeUpstream, ca: trustme.CA,
                                                 monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    ca.cert_pem.write_to_path(str(tmp_path) + "/ca.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path) + "/ca.pem")  # OpenSSL's own trust-store variable
    gw = start(servers, tls_upstream.base_url)
    try:
        for _ in range(2):
            tls_upstream.enqueue(PATH, text_stream(["over ", "TLS"]))
            got = "".join(c.choices[0].delta.content or "" for c in client(gw).chat.completions.create(
                model="m", messages=MESSAGES, stream=True) if c.choices)
            assert got == "over TLS"
        assert len({r.peer_port for r in tls_upstream.received}) == 1, "the TLS connection was kept alive"
    finally:
        servers.run(gw.stop())


def test_tls_upstream_with_an_untrusted_certificate_is_a_failed_connection(
        servers: LoopThread, tls_upstream: FakeUpstream) -> None:
    gw = start(servers, tls_upstream.base_url)
    try:
        with pytest.raises(openai.APIStatusError) as err:
            client(gw).chat.completions.create(model="m", messages=MESSAGES)
        assert err.value.status_code == 502
        assert not tls_upstream.received, "nothing was sent over an unverified connection"
        assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="up/up-model",
                         outcome="connect_error") >= 1
    finally:
        servers.run(gw.stop())


def body_script(data: bytes, headers: dict[str, str]) -> Script:
    return Script([data], headers={"Content-Type": "application/json", **headers})


COMPLETION = (b'{"id":"c","object":"chat.completion","created":1,"model":"%s","choices":[{"index":0,'
              b'"message":{"role":"assistant","content":"packed"},"finish_reason":"stop"}]}' % MODEL.encode())


@pytest.mark.parametrize("encoding", ["gzip", "identity"])
def test_bodies_compressed_or_framed_by_length(upstream: FakeUpstream, gateway: GatewayServer, encoding: str) -> None:
    data = gzip.compress(COMPLETION) if encoding == "gzip" else COMPLETION
    upstream.enqueue(PATH, body_script(data, {"Content-Encoding": encoding, "Content-Length": str(len(data))}))
    body = client(gateway).chat.completions.create(model="m", messages=MESSAGES)
    assert body.choices[0].message.content == "packed"
    assert upstream.received[-1].headers.get("Accept-Encoding") == "identity"


def test_a_body_framed_by_the_connections_end(servers: LoopThread, gateway: GatewayServer) -> None:
    """An HTTP/1.0-style answer: no length, no chunks, the body ends when the server closes."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + COMPLETION)
        await writer.drain()
        writer.close()

    raw = servers.run(asyncio.start_server(answer, "127.0.0.1", 0))
    port = raw.sockets[0].getsockname()[1]
    gw = start(servers, f"http://127.0.0.1:{port}")
    try:
        body = client(gw).chat.completions.create(model="m", messages=MESSAGES)
        assert body.choices[0].message.content == "packed"
    finally:
        servers.run(gw.stop())
        raw.close()


@pytest.mark.parametrize("answer", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                    b"NOT HTTP\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}"])
def test_a_broken_response_is_a_502_never_a_crash(servers: LoopThread, answer: bytes) -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        await reader.read()  # keep the connection open until the gateway drops it
        writer.close()

    raw = servers.run(asyncio.start_server(reply, "127.0.0.1", 0))
    port = raw.sockets[0].getsockname()[1]
    gw = start(servers, f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(openai.APIStatusError) as err:
            client(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True)
        assert err.value.status_code == 502
    finally:
        servers.run(gw.stop())
        raw.close()
