"""An upstream attempt cut by its client's leaving is counted once, as `client_cancelled` in
`llm_gateway_upstream_attempts_total` (docs/extensions.md, "Failure semantics" and "Attempts without an
answer"; docs/reference.md, Metrics): whatever the API, a hedge's two racers included, and a primary still
in its hedge's delay cut with its request; an attempt that delivered its first token was `ok` and stays so.
Clients on raw sockets that leave at a chosen point, the scripted upstream."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from tests.chat_scripts import chunk
from tests.contract_metrics import ATTEMPT_OUTCOMES
from tests.fake_upstream import FakeUpstream, Hang, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_unanswered_usage import KEY, PROMPT, ROLE, A, B, config, request_line

ATTEMPTS = "llm_gateway_upstream_attempts_total"


def outcomes(gw: GatewayServer, **labels: str) -> dict[str, float]:
    """The attempts counted, by outcome (those with a count only)."""
    counts = {o: gw.sample(ATTEMPTS, outcome=o, **labels) for o in ATTEMPT_OUTCOMES}
    return {o: n for o, n in counts.items() if n}


def leave(gw: GatewayServer, path: str, body: dict[str, Any], until: Callable[[], bool], servers: LoopThread,
          seen: bytes = b"") -> None:
    """A client that sends its request and goes away (no close of its own beyond the socket's) once
    `until()` holds and it has read `seen` (nothing: before any byte of the answer)."""
    raw = orjson.dumps(body)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(head + raw)
        got = b""
        while seen not in got:
            chunk_ = sock.recv(65536)
            assert chunk_, "the gateway closed first"
            got += chunk_
        servers.run(wait_until(until, 5.0))


def asked(upstream: FakeUpstream, *paths: str) -> Callable[[], bool]:
    return lambda: all(len(upstream.bodies(p)) == 1 for p in paths)


@pytest.mark.parametrize("when", ["in the hedge's delay", "while both race"])
def test_the_attempts_of_a_hedged_request_its_client_left_are_cut_and_counted(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], tmp_path: Path,
        when: str) -> None:
    """In the delay, the primary was left running when its client went (its upstream request open, uncounted,
    unbilled): it is cut with its request now. Both racers cut are both `client_cancelled`, not one a hedge's
    loser."""
    racing = when == "while both race"
    gw = make_gateway(config(upstream.base_url, tmp_path, hedge_after_ms=50 if racing else 60_000))
    paths = (A, B) if racing else (A,)
    for path in paths:
        upstream.enqueue(path, Script(silent=True))
    with capture_logs() as logs:
        leave(gw, "/v1/chat/completions", {"model": "m", "messages": PROMPT, "stream": True},
              asked(upstream, *paths), servers)
        line = request_line(servers, logs)
    assert line["outcome"] == "cancelled"
    assert outcomes(gw) == {"client_cancelled": len(paths)}
    assert outcomes(gw, deployment="a/model-a") == {"client_cancelled": 1}
    assert [u["reason"] for u in line["unanswered_attempts"]] == ["client_gone"] * len(paths)
    servers.run(wait_until(lambda: len(upstream.closed_at) == len(paths), 5.0))  # each upstream request closed
    assert len(upstream.bodies(B)) == len(paths) - 1  # no hedge was started in its delay


def test_an_embeddings_attempt_cut_by_its_client_is_counted(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """Every API's attempts run through the one attempt loop: an embeddings request's too."""
    gw = make_gateway(config(upstream.base_url, tmp_path))
    path = "/a/v1/embeddings"
    upstream.enqueue(path, Script(silent=True))
    with capture_logs() as logs:
        leave(gw, "/v1/embeddings", {"model": "m", "input": "hi"}, asked(upstream, path), servers)
        assert request_line(servers, logs)["outcome"] == "cancelled"
    assert outcomes(gw) == {"client_cancelled": 1}


def test_a_client_gone_before_the_first_token_cuts_the_attempt_and_after_it_the_attempt_stays_ok(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """Counted once each: the attempt that reached its first token was `ok` when the stream committed,
    and the client's leaving mid-stream does not count it again."""
    gw = make_gateway(config(upstream.base_url, tmp_path))
    upstream.enqueue(A, Script([ROLE, Hang()]))  # a preamble, no token: cut before its first token
    with capture_logs() as logs:
        leave(gw, "/v1/chat/completions", {"model": "m", "messages": PROMPT, "stream": True}, asked(upstream, A),
              servers)
        request_line(servers, logs)
    assert outcomes(gw) == {"client_cancelled": 1}
    upstream.enqueue(A, Script([ROLE, sse(chunk({"content": "First"})), Hang()]))
    with capture_logs() as logs:
        leave(gw, "/v1/chat/completions", {"model": "m", "messages": PROMPT, "stream": True}, lambda: True,
              servers, seen=b"First")
        assert request_line(servers, logs)["outcome"] == "cancelled"
    assert outcomes(gw) == {"client_cancelled": 1, "ok": 1}
