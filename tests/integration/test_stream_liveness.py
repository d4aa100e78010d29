"""Streams that stay alive: Japanese prose with redaction on streams as it comes (CONTRACT §5.1), and
an answer held for a guardrail's verdict keeps its line alive with headers and comments (§4.2, §5.2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import openai
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts
from tests.chat_scripts import text_stream
from tests.fake_upstream import FakeUpstream, Gate, Pause
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, stream_script

# times keep-alives against a client's read timeout: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

PATH = "/v1/chat/completions"
KEY = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
JAPANESE = ("東京の天気は晴れです。明日は雨が降るので、傘を持って出かけてください。週末はまた晴れるでしょう。"
            "会議は午後三時から始まります。資料は共有フォルダに置いてあります。"
            f"なお、キーは{KEY}です。使い終わったら必ず無効にしてください。")
MASKED = JAPANESE.replace(KEY, "[REDACTED:openai_key]")
TERM = {"name": "nightingale", "type": "terms", "terms": ["project nightingale"], "stage": "output", "mode": "hold"}
GOOD = "The plan is simple. Nothing secret here at all today.\n"
BAD = "The plan is simple. Project Nightingale starts on Monday.\n"


def config(url: str, *, keepalive_after_s: float = 10.0, guardrails: list[dict[str, Any]] | None = None) -> Any:
    return parse_config({
        "server": {"keepalive_after_s": keepalive_after_s},
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"},
                      "a": {"type": "anthropic", "base_url": f"{url}/a", "api_key": "ka"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}], "redaction": "p",
                    "guardrails": [g["name"] for g in guardrails or []]},
                   {"name": "claude", "deployments": [{"provider": "a", "model": "c"}], "redaction": "p",
                    "guardrails": [g["name"] for g in guardrails or []]}],
        "guardrails": guardrails or [],
        "redaction": {"profiles": {"p": {"rules": ["secrets", "pii"]}}},
    }, env={})


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def gated(deltas: list[str], at: int) -> tuple[Any, Gate]:
    """A chat stream of `deltas` whose upstream stops before delta `at` until the gate opens."""
    script, gate = text_stream(deltas), Gate()
    script.parts.insert(1 + at, gate)  # parts[0] is the role chunk
    return script, gate


def test_japanese_prose_in_small_deltas_reaches_the_client_while_the_upstream_is_still_sending(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    deltas = pieces(JAPANESE, 2)
    script, gate = gated(deltas, len(deltas) // 4)  # three quarters of the answer wait behind the gate
    upstream.enqueue(PATH, script)
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
    got: list[str] = []
    before_gate = ""
    for c in client.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "hi"}]):
        if c.choices and c.choices[0].delta.content:
            got.append(c.choices[0].delta.content)
            if not gate.opened.is_set():
                before_gate = "".join(got)
                gate.opened.set()
    assert gate.waited == [True], "the client saw text before the upstream sent the rest of the answer"
    assert before_gate and MASKED.startswith(before_gate)
    assert "".join(got) == MASKED
    assert all(KEY[:8] not in piece for piece in got)
    assert len(got) > len(deltas) // 2, "it arrives delta by delta, not a line at a time"


@pytest.mark.parametrize("answer", [GOOD, BAD])
def test_a_held_answer_gets_headers_and_keepalive_comments_before_its_verdict(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], answer: str) -> None:
    gw = make_gateway(config(upstream.base_url, keepalive_after_s=0.2, guardrails=[TERM]))
    deltas = pieces(answer, 4)
    script, gate = gated(deltas, len(deltas))  # the whole answer, then the upstream waits: no verdict yet
    upstream.enqueue(PATH, script)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{gw.base_url}/chat/completions", json=body, timeout=20) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        lines = resp.iter_lines()
        before = []
        for line in lines:
            before.append(line)
            if line.startswith(": keepalive"):
                break
        assert not any(line.startswith("data:") for line in before), "nothing of a held answer before its verdict"
        gate.opened.set()
        after = [line for line in lines if line.startswith("data:")]
    assert gate.waited == [True]
    if answer is GOOD:
        assert after[-1] == "data: [DONE]"
        chunks = [json.loads(line[6:]) for line in after[:-1]]
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == GOOD
    else:
        assert len(after) == 1 and '"error"' in after[0] and "guardrail" in after[0], "one error event, no [DONE]"
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail="nightingale", stage="output",
                     verdict="pass" if answer is GOOD else "block") == 1


@pytest.mark.parametrize("keepalive_after_s", [0.3, 30.0])
def test_a_client_whose_read_timeout_is_shorter_than_a_held_answer_gets_it(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], keepalive_after_s: float) -> None:
    """The answer takes 2 s and the client gives up after 1 s of silence: it succeeds because comments
    keep coming while the guardrail holds the answer (the 30 s case shows the premise: without them it
    times out)."""
    gw = make_gateway(config(upstream.base_url, keepalive_after_s=keepalive_after_s, guardrails=[TERM]))
    script = text_stream(pieces(GOOD, 4))
    script.parts.insert(2, Pause(2.0))  # a slow answer (scenario pacing, not synchronisation)
    upstream.enqueue(PATH, script)
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=httpx.Timeout(10.0, read=1.0))
    messages: Any = [{"role": "user", "content": "hi"}]
    if keepalive_after_s > 2.0:
        with pytest.raises(openai.APITimeoutError):
            list(client.chat.completions.create(model="m", stream=True, messages=messages))
        return
    text = "".join(c.choices[0].delta.content or "" for c in
                   client.chat.completions.create(model="m", stream=True, messages=messages) if c.choices)
    assert text == GOOD


@pytest.mark.parametrize("answer", [["All ", "fine."], ["All about project ", "nightingale."]])
def test_a_held_responses_stream_keeps_its_line_alive_too(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], answer: list[str]) -> None:
    gw = make_gateway(config(upstream.base_url, keepalive_after_s=0.2, guardrails=[TERM]))
    script, gate = stream_script(Answer().message(answer).stream_events()), Gate()
    script.parts.insert(len(script.parts) - 1, gate)  # everything but `response.completed`: no verdict yet
    upstream.enqueue("/v1/responses", script)
    body = {"model": "m", "stream": True, "input": "hi"}
    with httpx.stream("POST", f"{gw.base_url}/responses", json=body, timeout=20) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        before = []
        for line in lines:
            before.append(line)
            if line.startswith(": keepalive"):
                break
        assert not any(line.startswith("data:") for line in before)
        gate.opened.set()
        events = [json.loads(line[6:]) for line in lines if line.startswith("data:")]
    assert gate.waited == [True]
    if answer[-1] == "fine.":
        assert events[-1]["type"] == "response.completed"
        assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "All fine."
    else:
        assert [(e["type"], e["code"]) for e in events] == [("error", "guardrail_blocked")], "one error event"


@pytest.mark.parametrize("answer", [["All ", "fine."], ["All about project ", "nightingale."]])
def test_a_held_messages_stream_keeps_its_line_alive_too(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], answer: list[str]) -> None:
    gw = make_gateway(config(upstream.base_url, keepalive_after_s=0.2, guardrails=[TERM]))
    script, gate = anthropic_scripts.text_stream(answer), Gate()
    script.parts.insert(len(script.parts) - 2, gate)  # before message_delta and message_stop: no verdict yet
    upstream.enqueue("/a/v1/messages", script)
    body = {"model": "claude", "stream": True, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{gw.base_url}/messages", json=body, timeout=20,
                      headers={"anthropic-version": "2023-06-01"}) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        before = []
        for line in lines:
            before.append(line)
            if line.startswith(": keepalive"):
                break
        assert not any(line.startswith("data:") for line in before)
        gate.opened.set()
        events = [json.loads(line[6:]) for line in lines if line.startswith("data:")]
    assert gate.waited == [True]
    if answer[-1] == "fine.":
        assert events[-1]["type"] == "message_stop"
        assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == "All fine."
    else:
        assert [(e["type"], e["error"]["type"]) for e in events] == [("error", "invalid_request_error")]
