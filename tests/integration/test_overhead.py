"""`llm_gateway_overhead_seconds` is the time the gateway really adds to the first token (issue #62,
docs/overhead.md): a `gateway serve` process between a raw-socket client and a scripted upstream with a
fixed TTFT, both in this process on 127.0.0.1, timed on the same monotonic clock. Per request, the
gateway's own figure equals what the client saw at its socket (request written to first token read)
minus what the upstream took (request read to first token written), within 1 ms; for streams and
bodies, Chat Completions and Messages, with redaction on and off.

- test_overhead_is_the_client_ttft_minus_the_upstreams
- a hold guardrail's wait for the whole answer is not the gateway's own time:
  test_a_hold_guardrails_wait_is_not_overhead
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import anthropic_scripts as a
from tests import chat_scripts as c
from tests.fake_upstream import FakeUpstream, Pause
from tests.harness import GatewayServer, ProcessLog, gateway_config
from tests.ports import free_port

# measures the latency the gateway adds: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

UPSTREAM_TTFT_S = 0.05
TOLERANCE_S = 0.001
RUNS = 15  # at most: the first run within the tolerance ends the test
USER = [{"role": "user", "content": "Say hello"}]


def _answer(path: str, stream: bool) -> tuple[bytes, bytes]:
    """The upstream's answer: what goes out with the first token, then the rest."""
    if path.endswith("/chat/completions"):
        if not stream:
            return orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "up",
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
                                              "finish_reason": "stop"}], "usage": c.USAGE}), b""
        parts = c.text_stream(["Hello", " world"]).parts
        first = 2  # the role chunk and the first token
    else:
        if not stream:
            return orjson.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "up",
                                 "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn",
                                 "stop_sequence": None, "usage": {**a.USAGE_START, "output_tokens": 2}}), b""
        parts = a.text_stream(["Hello", " world"]).parts
        first = 4  # message_start, ping, the block's start and its first delta
    data = [p for p in parts if isinstance(p, bytes)]
    return b"".join(data[:first]), b"".join(data[first:])


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


class TimedUpstream:
    """An HTTP/1.1 upstream on a thread of its own: reads a request whole, waits UPSTREAM_TTFT_S, writes
    its head with the first token in one send, and records how long that really took."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.ttfts: list[float] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                length = next(int(v) for k, _, v in (h.partition(":") for h in lines[1:])
                              if k.lower() == "content-length")
                while len(buf) < length:
                    buf += conn.recv(65536)
                body, buf = orjson.loads(buf[:length]), buf[length:]
                t_in = time.perf_counter()
                self._answer(conn, lines[0].split()[1], bool(body.get("stream")), t_in)

    def _answer(self, conn: socket.socket, path: str, stream: bool, t_in: float) -> None:
        first, rest = _answer(path, stream)
        if stream:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            first, rest = head + _chunk(first), _chunk(rest) + b"0\r\n\r\n"
        else:
            first = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
                len(first), first)
        time.sleep(max(0.0, t_in + UPSTREAM_TTFT_S - time.perf_counter()))
        conn.sendall(first)
        self.ttfts.append(time.perf_counter() - t_in)
        if rest:
            conn.sendall(rest)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TimedUpstream, int, int]]:
    up = TimedUpstream()
    port, mport = free_port(), free_port()
    base = f"http://127.0.0.1:{up.port}"
    models = []
    for name, provider in (("gpt", "oai"), ("claude", "ant")):
        models.append({"name": name, "deployments": [{"provider": provider, "model": "up"}]})
        models.append({"name": f"{name}-masked", "redaction": "p", "deployments": [{"provider": provider,
                                                                                       "model": "up"}]})
    config = {"server": {"port": port, "metrics_port": mport}, "auth": {"allow_unauthenticated": True},
              "providers": {"oai": {"type": "openai", "base_url": f"{base}/v1", "api_key": "sk-x"},
                            "ant": {"type": "anthropic", "base_url": base, "api_key": "sk-ant-x"}},
              "redaction": {"profiles": {"p": {"rules": ["secrets", "pii"]}}}, "models": models}
    path: Path = tmp_path_factory.mktemp("overhead") / "gateway.yaml"
    path.write_bytes(orjson.dumps(config))  # JSON is YAML
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = ProcessLog(proc)
    try:
        log.wait("listening")
        yield up, port, mport
    finally:
        proc.terminate()
        proc.wait(10)
        up.sock.close()


def _client_ttft(port: int, path: str, body: dict[str, object], marker: bytes) -> float:
    """Request written to the read that brought `marker` (the first token; a body: its first byte)."""
    payload = orjson.dumps(body)
    req = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
           f"anthropic-version: 2023-06-01\r\nconnection: close\r\ncontent-length: {len(payload)}\r\n\r\n"
           ).encode() + payload
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(req)
        t_sent = time.perf_counter()
        got, ttft = b"", None
        while data := s.recv(65536):
            got += data
            if ttft is None and marker in got:
                ttft = time.perf_counter() - t_sent
    assert got.startswith(b"HTTP/1.1 200") and ttft is not None, got[:300]
    return ttft


def _overhead_sum(mport: int, api: str, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "llm_gateway_overhead_seconds_sum" and s.labels == {"api": api, "model": model})


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "redaction"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("api", ["chat", "messages"])
def test_overhead_is_the_client_ttft_minus_the_upstreams(setup: tuple[TimedUpstream, int, int], api: str,
                                                         stream: bool, masked: bool) -> None:
    up, port, mport = setup
    model = ("gpt" if api == "chat" else "claude") + ("-masked" if masked else "")
    path = "/v1/chat/completions" if api == "chat" else "/v1/messages"
    body: dict[str, object] = {"model": model, "messages": USER, "stream": stream, "max_tokens": 20}
    marker = b"Hello" if stream else b"HTTP/1.1"
    _client_ttft(port, path, body, marker)  # the upstream connection is opened: not a request's cost
    diffs = []
    for _ in range(RUNS):
        before = _overhead_sum(mport, api, model)
        client = _client_ttft(port, path, body, marker)
        upstream = up.ttfts[-1]
        overhead = _overhead_sum(mport, api, model) - before
        assert overhead > 0
        diffs.append(overhead - (client - upstream))
        if abs(diffs[-1]) < TOLERANCE_S:
            break
    # the closest of a few runs: on a shared machine a run is stretched by whichever process the kernel
    # ran instead of one of the three (each runs on the same cores), on either side of the difference; a
    # part of the gateway's own time left out of (or a part of the upstream's counted in) the figure
    # would show in every run
    assert min(abs(d) for d in diffs) < TOLERANCE_S, diffs


def test_a_hold_guardrails_wait_is_not_overhead(upstream: FakeUpstream,
                                                make_gateway: Callable[..., GatewayServer]) -> None:
    """The answer's first token comes at once, its end a second later: a hold guardrail keeps the text
    until the end, so the client's first token is a second late, and none of that second is the gateway's."""
    hold = {"name": "words", "type": "terms", "terms": ["never said"], "stage": "output", "mode": "hold"}
    gw = make_gateway(gateway_config(upstream.base_url, guardrails=[hold], models=[
        {"name": "m", "guardrails": ["words"], "deployments": [{"provider": "up", "model": "up-model"}]}]))
    script = c.text_stream(["Hello", " world"])
    script.parts.insert(2, Pause(1.0))  # after the first token (scenario pacing, not synchronisation)
    upstream.enqueue("/v1/chat/completions", script)
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
    stream = client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == "Hello world"
    ttft = gw.sample("llm_gateway_time_to_first_token_seconds_sum", api="chat", model="m")
    overhead = gw.sample("llm_gateway_overhead_seconds_sum", api="chat", model="m")
    assert ttft >= 1.0 and 0 < overhead < 0.5, (ttft, overhead)
