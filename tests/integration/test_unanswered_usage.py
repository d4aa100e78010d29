"""Attempts the upstream billed that did not answer the client are charged (docs/extensions.md, "Attempts
without an answer"): an empty answer dropped for the next deployment, a hedge that lost, a client gone
before the first token, an attempt the gateway stopped waiting for (a timeout); an attempt the upstream
refused (an error status, an in-band error, a reset) is not. End to end against the scripted upstream,
with the official SDK where a client reads an answer and a raw socket where it leaves before any byte:
the charge is read back where each account keeps it: the log line, the spend ledger's row (SQLite), the
key's budget spend (`GET /v1/gateway/spend`), its `tpm` window (the state backend) and the token metrics."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from gateway.config.types import Config
from tests import anthropic_scripts as a
from tests.chat_scripts import USAGE, chunk, completion, error_script, text_stream, usage_chunk
from tests.fake_upstream import FakeUpstream, Hang, Pause, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until

KEY = "gw-key-unanswered"
A, B, C = "/a/v1/chat/completions", "/b/v1/chat/completions", "/c/v1/messages"
PROMPT = [{"role": "user", "content": "tell me a long story " * 20}]
ESTIMATE = -(-len(orjson.dumps(PROMPT)) // 4)  # the gateway's estimate: a token per 4 bytes of the prompt's JSON
PRICE = {"input": 1_000_000, "output": 1_000_000}  # a dollar a token: a charge in dollars is its tokens
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
ROLE = sse(chunk({"role": "assistant", "content": ""}))
# an empty answer from a reasoning model: nothing to show, and 300 tokens billed
EMPTY_USAGE = {"prompt_tokens": 40, "completion_tokens": 300, "total_tokens": 340,
               "completion_tokens_details": {"reasoning_tokens": 300}}


def config(url: str, tmp_path: Path, hedge_after_ms: float = 0,
           timeouts: dict[str, dict[str, float]] | None = None) -> Config:
    """`timeouts`: a provider's own, over `TIMEOUTS`."""
    def own(name: str) -> dict[str, float]:
        return {**TIMEOUTS, **(timeouts or {}).get(name, {})}

    def openai_type(name: str) -> dict[str, Any]:
        return {"type": "openai", "base_url": f"{url}/{name}/v1", "api_key": f"k{name}", "timeouts": own(name)}

    return parse_config({
        "auth": {"keys": [{"name": "team", "key": KEY, "tpm": 1_000_000}]},
        "store": {"url": f"sqlite:///{tmp_path}/gateway.db", "ledger_journal": "off"},  # rows committed at once
        "providers": {"a": openai_type("a"), "b": openai_type("b"),
                      "c": {"type": "anthropic", "base_url": f"{url}/c", "api_key": "kc", "timeouts": own("c")}},
        "models": [{"name": "m", "hedge_after_ms": hedge_after_ms,
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1},
                    "deployments": [{"provider": "a", "model": "model-a", "price": PRICE},
                                    {"provider": "b", "model": "model-b", "price": PRICE}]},
                   {"name": "claude", "deployments": [{"provider": "c", "model": "claude-c", "price": PRICE}]}],
    }, env={})


def request_line(servers: LoopThread, logs: list[dict[str, Any]]) -> dict[str, Any]:
    """The request's log line: written after its spend row is committed and its accounts settled."""
    servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs), 5.0))
    return next(e for e in logs if e["event"] == "request")


def spent(gw: GatewayServer) -> float:
    req = urllib.request.Request(f"{gw.base_url}/gateway/spend", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return float(json.loads(resp.read())["spend_usd"])


def tpm_used(servers: LoopThread, gw: GatewayServer) -> int:
    """The tokens the key's `tpm` window holds (both of its minutes: a minute's end between the request and
    this read moves them, never drops them)."""
    async def read() -> int:
        assert gw.app is not None
        key = gw.config.auth.keys[0]
        decision, _ = await gw.app.state.check_request(key.counter, None, 1_000_000, 0, gw.app.runtime.clock())
        assert decision.counts is not None
        return decision.counts[2] + decision.counts[3]

    return servers.run(read())


def ledger(tmp_path: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(tmp_path / "gateway.db")) as conn:
        rows = conn.execute("SELECT deployment, outcome, input_tokens, output_tokens, cost_usd FROM gw_spend")
        return rows.fetchall()


def sdk(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0, timeout=20)


def stream_text(gw: GatewayServer) -> str:
    chunks = sdk(gw).chat.completions.create(model="m", messages=PROMPT, stream=True)  # type: ignore[arg-type]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def assert_accounts(servers: LoopThread, gw: GatewayServer, tmp_path: Path, line: dict[str, Any],
                    served_by: str, outcome: str) -> None:
    """The line's counts are the request's whole charge, and every account holds the same."""
    tokens = line["input_tokens"] + line["output_tokens"]
    assert line["cost_usd"] == tokens  # a dollar a token, at every deployment
    assert spent(gw) == tokens
    assert tpm_used(servers, gw) == tokens
    assert ledger(tmp_path) == [(served_by, outcome, line["input_tokens"], line["output_tokens"], tokens)]


@pytest.mark.parametrize("usage", ["reported", "none"])
def test_an_empty_answer_dropped_for_the_next_deployment_is_charged(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], tmp_path: Path,
        usage: str) -> None:
    """Its usage comes after its finish (read on for it: the pause puts it in a read of its own), and is
    charged at its own deployment; without any, the prompt's estimate, marked."""
    gw = make_gateway(config(upstream.base_url, tmp_path))
    tail = [Pause(0.05), sse(usage_chunk(EMPTY_USAGE))] if usage == "reported" else []
    upstream.enqueue(A, Script([ROLE, sse(chunk({}, "stop")), *tail, b"data: [DONE]\n\n"]))
    upstream.enqueue(B, text_stream(["from ", "b"]))
    with capture_logs() as logs:
        assert stream_text(gw) == "from b"
        line = request_line(servers, logs)
    charged = (40, 300) if usage == "reported" else (ESTIMATE, 0)
    assert (line["input_tokens"], line["output_tokens"]) == (charged[0] + 11, charged[1] + 7)
    assert line["estimated"] is (usage == "none") and line["deployment"] == "b/model-b"
    assert_accounts(servers, gw, tmp_path, line, "b/model-b", "ok")
    assert line.get("unanswered_attempts") == [{
        "deployment": "a/model-a", "reason": "empty_answer", "input_tokens": charged[0], "output_tokens": charged[1],
        "cost_usd": sum(charged), "estimated": usage == "none"}]
    reported_a = {"input": 40, "output": 300} if usage == "reported" else {"input": 0, "output": 0}
    for t in ("input", "output"):
        assert gw.sample("llm_gateway_tokens_total", provider="a", type=t) == reported_a[t]
    assert gw.sample("llm_gateway_tokens_total", provider="b", type="input") == USAGE["prompt_tokens"]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="input") == (usage == "none") * ESTIMATE
    assert gw.sample("llm_gateway_usage_missing_total", provider="a") == (usage == "none")


def test_a_hedge_that_lost_is_charged_its_prompt(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """The primary never answers; the hedge does and wins; the primary, asked all the same, is cancelled
    and charged the prompt's estimate at its own deployment."""
    gw = make_gateway(config(upstream.base_url, tmp_path, hedge_after_ms=100))
    upstream.enqueue(A, Script([ROLE, Hang()]))
    upstream.enqueue(B, text_stream(["fast"]))
    with capture_logs() as logs:
        assert stream_text(gw) == "fast"
        line = request_line(servers, logs)
    assert (line["input_tokens"], line["output_tokens"], line["estimated"]) == (ESTIMATE + 11, 7, True)
    assert_accounts(servers, gw, tmp_path, line, "b/model-b", "ok")
    assert line.get("unanswered_attempts") == [{
        "deployment": "a/model-a", "reason": "hedge_lost", "input_tokens": ESTIMATE, "output_tokens": 0,
        "cost_usd": ESTIMATE, "estimated": True}]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="input") == ESTIMATE
    assert gw.sample("llm_gateway_upstream_attempts_total", deployment="a/model-a", outcome="hedge_cancelled") == 1


def post_and_leave(servers: LoopThread, gw: GatewayServer, upstream: FakeUpstream, path: str,
                   body: dict[str, Any], upstream_path: str) -> None:
    """A client that sends its request and goes away once the upstream has it, before any byte of the answer."""
    raw = orjson.dumps(body)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(head + raw)
        servers.run(wait_until(lambda: len(upstream.bodies(upstream_path)) == 1, 5.0))


GONE = {  # what the upstream had done when the client left: (its script, a stream request)
    "stream, head not back": (Script(silent=True), True),
    "stream, preamble": (Script([ROLE, Hang()]), True),
    "body": (Script(silent=True), False),
}


@pytest.mark.parametrize("case", sorted(GONE))
def test_a_client_gone_before_the_first_token_is_charged_the_prompt(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], tmp_path: Path,
        case: str) -> None:
    """The upstream has the prompt, and reported nothing: the prompt's estimate, marked."""
    gw = make_gateway(config(upstream.base_url, tmp_path))
    script, stream = GONE[case]
    upstream.enqueue(A, script)
    with capture_logs() as logs:
        post_and_leave(servers, gw, upstream, "/v1/chat/completions",
                       {"model": "m", "messages": PROMPT, "stream": stream}, A)
        line = request_line(servers, logs)
    assert line["outcome"] == "cancelled"
    assert (line["input_tokens"], line["output_tokens"], line["estimated"]) == (ESTIMATE, 0, True)
    assert_accounts(servers, gw, tmp_path, line, "a/model-a", "cancelled")
    assert line["deployment"] == "a/model-a" and line.get("unanswered_attempts") == [{
        "deployment": "a/model-a", "reason": "client_gone", "input_tokens": ESTIMATE, "output_tokens": 0,
        "cost_usd": ESTIMATE, "estimated": True}]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="input") == ESTIMATE
    assert gw.sample("llm_gateway_usage_missing_total", provider="a") == 0  # the upstream omitted nothing
    attempts = "llm_gateway_upstream_attempts_total"  # the attempt counted once, as cut by its client
    assert gw.sample(attempts, deployment="a/model-a", outcome="client_cancelled") == gw.sample(attempts) == 1


def test_a_client_gone_after_message_start_is_charged_the_input_anthropic_counted(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """`message_start` counts the whole input (and an output token) before any text: that count is
    charged, as the provider's, not the estimate."""
    gw = make_gateway(config(upstream.base_url, tmp_path))
    upstream.enqueue(C, a.stream([a.message_start(), a.ping()], tail=[Hang()]))
    with capture_logs() as logs:
        post_and_leave(servers, gw, upstream, "/v1/messages",
                       {"model": "claude", "max_tokens": 100, "messages": PROMPT, "stream": True}, C)
        line = request_line(servers, logs)
    assert (line["input_tokens"], line["cached_tokens"], line["output_tokens"]) == (30, 10, 1)
    assert line["estimated"] is False
    assert_accounts(servers, gw, tmp_path, line, "c/claude-c", "cancelled")  # cache reads: the input price here
    assert line.get("unanswered_attempts") == [{"deployment": "c/claude-c", "reason": "client_gone",
                                                "input_tokens": 30, "output_tokens": 1, "cost_usd": 31,
                                                "estimated": False}]
    assert gw.sample("llm_gateway_tokens_total", model="claude", provider="c", type="input") == 30
    assert gw.sample("llm_gateway_estimated_tokens_total", model="claude") == 0


SHORT = 0.3  # the timeout of the deployment that is let time out: it never answers, so no machine is too slow


def test_an_attempt_past_first_token_s_is_charged_its_prompt(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """The upstream sent its head and preamble, then nothing within `first_token_s`: it had the prompt and
    was working on it when the gateway stopped waiting, as a caller's cut it bills. Charged the prompt's
    estimate at its own deployment; the next deployment answers."""
    gw = make_gateway(config(upstream.base_url, tmp_path, timeouts={"a": {"first_token_s": SHORT}}))
    upstream.enqueue(A, Script([ROLE, Hang()]))
    upstream.enqueue(B, text_stream(["from ", "b"]))
    with capture_logs() as logs:
        assert stream_text(gw) == "from b"
        line = request_line(servers, logs)
    assert (line["input_tokens"], line["output_tokens"], line["estimated"]) == (ESTIMATE + 11, 7, True)
    assert_accounts(servers, gw, tmp_path, line, "b/model-b", "ok")
    assert line.get("unanswered_attempts") == [{
        "deployment": "a/model-a", "reason": "first_token_timeout", "input_tokens": ESTIMATE, "output_tokens": 0,
        "cost_usd": ESTIMATE, "estimated": True}]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="input") == ESTIMATE
    assert gw.sample("llm_gateway_upstream_attempts_total", deployment="a/model-a", outcome="first_token_timeout") == 1


REFUSED = {  # what an upstream does not bill: it refused the request, or failed before working on it;
    # (its script, the attempt's outcome)
    "http_5xx": (error_script(500, "server_error", etype="server_error"), "http_5xx"),
    "http_429": (error_script(429, "rate_limit_exceeded", etype="requests"), "http_429"),
    "quota": (error_script(429, "insufficient_quota", etype="insufficient_quota"), "quota"),
    "inband_error": (Script([ROLE, sse({"error": {"message": "overloaded", "type": "server_error",
                                                  "code": "server_error"}})]), "inband_error"),
    "connect_error": (Script(reset=True), "connect_error"),
    # an error status whose body never came: timed out reading it, and still the upstream's error
    "http_5xx, its body stalled": (Script([Hang()], 500, {"Content-Type": "application/json"}), "idle_timeout"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_attempt_the_upstream_refused_is_not_charged_one_that_timed_out_is(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], tmp_path: Path,
        case: str) -> None:
    """The first deployment refuses, the second times out before its first token, and the request fails:
    only the timed-out attempt is charged, and the spend row names its deployment."""
    script, outcome = REFUSED[case]
    stall = {"idle_s": SHORT} if outcome == "idle_timeout" else {}  # a's own answer is never raced
    gw = make_gateway(config(upstream.base_url, tmp_path, timeouts={"a": stall, "b": {"first_token_s": SHORT}}))
    upstream.enqueue(A, script)
    upstream.enqueue(B, Script([ROLE, Hang()]))
    with capture_logs() as logs:
        with pytest.raises(openai.APIStatusError):
            stream_text(gw)
        line = request_line(servers, logs)
    assert gw.sample("llm_gateway_upstream_attempts_total", deployment="a/model-a", outcome=outcome) == 1
    assert line.get("unanswered_attempts") == [{
        "deployment": "b/model-b", "reason": "first_token_timeout", "input_tokens": ESTIMATE, "output_tokens": 0,
        "cost_usd": ESTIMATE, "estimated": True}]
    assert (line["input_tokens"], line["output_tokens"], line["estimated"]) == (ESTIMATE, 0, True)
    assert_accounts(servers, gw, tmp_path, line, "b/model-b", line["outcome"])
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a") == 0
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="b", type="input") == ESTIMATE


def test_an_anthropic_attempt_past_first_token_s_is_charged_the_input_it_counted(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """`message_start` counted the input (and an output token), then nothing came: that count is charged,
    as the provider's, not the estimate; the request fails with it."""
    gw = make_gateway(config(upstream.base_url, tmp_path, timeouts={"c": {"first_token_s": SHORT}}))
    upstream.enqueue(C, a.stream([a.message_start(), a.ping()], tail=[Hang()]))
    with capture_logs() as logs:
        with pytest.raises(openai.APIStatusError):
            sdk(gw).chat.completions.create(model="claude", messages=PROMPT, stream=True)  # type: ignore[arg-type]
        line = request_line(servers, logs)
    assert (line["input_tokens"], line["cached_tokens"], line["output_tokens"]) == (30, 10, 1)
    assert line["estimated"] is False
    assert_accounts(servers, gw, tmp_path, line, "c/claude-c", line["outcome"])
    assert line.get("unanswered_attempts") == [{"deployment": "c/claude-c", "reason": "first_token_timeout",
                                                "input_tokens": 30, "output_tokens": 1, "cost_usd": 31,
                                                "estimated": False}]
    assert gw.sample("llm_gateway_tokens_total", model="claude", provider="c", type="input") == 30
    assert gw.sample("llm_gateway_estimated_tokens_total", model="claude") == 0


def test_a_body_request_past_total_s_is_charged_its_prompt(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """A non-stream request is waited for up to `total_s`: an upstream silent past it is charged the
    prompt's estimate; the next deployment's body answers."""
    gw = make_gateway(config(upstream.base_url, tmp_path, timeouts={"a": {"total_s": SHORT}}))
    upstream.enqueue(A, Script(silent=True))
    upstream.enqueue(B, completion("from b"))
    with capture_logs() as logs:
        got = sdk(gw).chat.completions.create(model="m", messages=PROMPT)  # type: ignore[arg-type]
        line = request_line(servers, logs)
    assert got.choices[0].message.content == "from b"
    assert (line["input_tokens"], line["output_tokens"], line["estimated"]) == (ESTIMATE + 11, 7, True)
    assert_accounts(servers, gw, tmp_path, line, "b/model-b", "ok")
    assert line.get("unanswered_attempts") == [{
        "deployment": "a/model-a", "reason": "total_timeout", "input_tokens": ESTIMATE, "output_tokens": 0,
        "cost_usd": ESTIMATE, "estimated": True}]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="input") == ESTIMATE


def test_a_stream_read_for_a_body_that_went_idle_is_charged_its_prompt_and_output(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        tmp_path: Path) -> None:
    """A deployment that only streams is streamed for a body client, which sees nothing before the whole
    answer: a stream that goes idle past its first token is dropped for the next deployment, charged the
    prompt and the output that came (both estimated: no usage came). Its `stream: false` rejection, an
    error status, is not charged."""
    gw = make_gateway(config(upstream.base_url, tmp_path, timeouts={"a": {"idle_s": 1.0}}))
    partial = "a partial answer"
    upstream.enqueue(A, error_script(400, "invalid_value", "stream must be true", param="stream"),
                     Script([ROLE, sse(chunk({"content": partial})), Hang()]))
    upstream.enqueue(B, completion("from b"))
    with capture_logs() as logs:
        got = sdk(gw).chat.completions.create(model="m", messages=PROMPT)  # type: ignore[arg-type]
        line = request_line(servers, logs)
    assert got.choices[0].message.content == "from b"
    assert [b.get("stream") for b in upstream.bodies(A)] == [None, True]
    output = -(-len(partial) // 4)
    assert (line["input_tokens"], line["output_tokens"], line["estimated"]) == (ESTIMATE + 11, output + 7, True)
    assert_accounts(servers, gw, tmp_path, line, "b/model-b", "ok")
    assert line.get("unanswered_attempts") == [{
        "deployment": "a/model-a", "reason": "idle_timeout", "input_tokens": ESTIMATE, "output_tokens": output,
        "cost_usd": ESTIMATE + output, "estimated": True}]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="output") == output
