"""Webhook guardrails end to end (CONTRACT §5.2): what a client reads while a webhook judges a stream, what
the webhook is sent, and how a webhook that misbehaves fails closed. The webhook is a scripted server on
127.0.0.1 (the fake upstream's `/guard`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import openai
import orjson
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as anthropic
from tests.chat_scripts import text_stream
from tests.fake_upstream import FakeUpstream, Hang, Script, json_script
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, stream_script

BAD = "The plan is simple. Project Nightingale starts on Monday.\n"
# per client API: its path, the upstream path its deployment is asked on, a stream of `text` for it
APIS: dict[str, tuple[str, str, Callable[[list[str]], Script]]] = {
    "chat": ("/v1/chat/completions", "/v1/chat/completions", text_stream),
    "responses": ("/v1/responses", "/v1/responses", lambda p: stream_script(Answer().message(p).stream_events())),
    "messages": ("/v1/messages", "/a/v1/messages", anthropic.text_stream),
}


def config(url: str, guardrails: list[dict[str, Any]]) -> Any:
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"},
                      "a": {"type": "anthropic", "base_url": f"{url}/a", "api_key": "ka"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}], "redaction": "p",
                    "guardrails": [g["name"] for g in guardrails]},
                   {"name": "claude", "deployments": [{"provider": "a", "model": "c"}], "redaction": "p",
                    "guardrails": [g["name"] for g in guardrails]}],
        "guardrails": guardrails,
        "redaction": {"profiles": {"p": {"rules": ["secrets"]}}},
    }, env={})


def hook(url: str, **extra: Any) -> dict[str, Any]:
    return {"name": "hook", "type": "webhook", "url": f"{url}/guard", "timeout_s": 2, **extra}


def pieces(text: str, size: int = 4) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def post(gw: GatewayServer, api: str, stream: bool = True) -> httpx.Response:
    path = APIS[api][0]
    body: dict[str, Any] = {"model": "m", "stream": stream}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "hi"}]
    elif api == "responses":
        body["input"] = "hi"
    else:
        body.update(model="claude", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    return httpx.post(gw.base_url.removesuffix("/v1") + path, json=body, timeout=20)


def events(wire: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name or "", data object) of each SSE event; `[DONE]` as ("done", {})."""
    out: list[tuple[str, dict[str, Any]]] = []
    for block in wire.split("\n\n"):
        name = next((line[7:] for line in block.split("\n") if line.startswith("event: ")), "")
        data = next((line[6:] for line in block.split("\n") if line.startswith("data: ")), None)
        if data is not None:
            out.append(("done", {}) if data == "[DONE]" else (name, orjson.loads(data)))
    return out


def text_of(wire: str) -> str:
    """The answer's text as a client of any of the APIs reads it from its deltas."""
    out = []
    for _, obj in events(wire):
        choices = obj.get("choices") or [{}]
        delta = obj.get("delta") if obj.get("type") != "message_delta" else None
        if isinstance(delta, dict):  # Messages
            out.append(delta.get("text") or "")
        elif isinstance(delta, str) and obj.get("type") == "response.output_text.delta":
            out.append(delta)
        elif "delta" in choices[0]:  # chat
            out.append(choices[0]["delta"].get("content") or "")
    return "".join(out)


def refusal_of(api: str, wire: str) -> dict[str, Any]:
    """The one event of a refused stream, in the API's own error shape (asserted here)."""
    [(name, obj)] = events(wire)
    if api == "messages":
        assert name == "error" and obj["error"]["type"] == "invalid_request_error", obj
        return obj["error"]  # type: ignore[no-any-return]
    if api == "responses":
        assert name == "error" and obj["code"] == "guardrail_blocked" and obj["sequence_number"] == 0, obj
        return obj  # type: ignore[no-any-return]
    assert obj["error"]["code"] == "guardrail_blocked" and obj["error"]["param"] == "hook", obj
    return obj["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("api", list(APIS))
def test_a_webhook_in_stream_mode_holds_the_answer_for_its_verdict(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], api: str) -> None:
    """`mode` left at its default, `stream`: a webhook judges only whole texts, so no text is known to be
    safe before its verdict; a refused answer must not reach the client (before, it streamed whole and
    the refusal came after it, as in `audit`)."""
    gw = make_gateway(config(upstream.base_url, [hook(upstream.base_url)]))
    _, up_path, script = APIS[api]
    upstream.enqueue("/guard", json_script({"allow": False, "reason": "policy"}),
                     json_script({"allow": True, "reason": ""}))
    upstream.enqueue(up_path, script(pieces(BAD)), script(pieces(BAD)))

    refused = post(gw, api)
    assert refused.status_code == 200
    assert "policy" in refusal_of(api, refused.text)["message"], "one error event, nothing of the answer"

    allowed = post(gw, api)  # the same answer, allowed: released whole after the verdict
    assert text_of(allowed.text) == BAD and "error" not in [name for name, _ in events(allowed.text)]
    assert [b["text"] for b in upstream.bodies("/guard")] == [BAD, BAD]
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail="hook", stage="output", verdict="block") == 1


@pytest.mark.parametrize("api", list(APIS))
def test_whole_answer_guardrails_of_a_stream_judge_the_masked_text_the_client_reads(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], api: str) -> None:
    """A stream's whole-answer guardrails judge what the client reads, as a body's do: the webhook is never
    sent a secret the redaction profile masks (before, it got the upstream's text, the key in clear), and a
    regex guardrail on that secret's pattern passes the answer whatever its mode or the request's `stream`
    (before, `hold` and `audit` refused a stream the same guardrail let through as a body or in `stream`)."""
    key = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
    answer = f"Your key is {key} and nothing else.\n"
    masked = "Your key is [REDACTED:openai_key] and nothing else.\n"
    pattern = {"name": "keys", "type": "regex", "patterns": ["sk-proj-[A-Za-z0-9]{20}"], "mode": "audit"}
    gw = make_gateway(config(upstream.base_url, [hook(upstream.base_url), pattern]))
    upstream.defaults["/guard"] = json_script({"allow": True})
    _, up_path, script = APIS[api]
    upstream.enqueue(up_path, script(pieces(answer, 3)))
    got = post(gw, api)
    assert text_of(got.text) == masked and "error" not in [name for name, _ in events(got.text)], got.text
    assert upstream.bodies("/guard") == [{"stage": "output", "model": "claude" if api == "messages" else "m",
                                          "text": masked}]
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail="keys", stage="output", verdict="pass") == 1
    assert gw.sample("llm_gateway_redactions_total", rule="openai_key") == 1, "masked for the judges, counted once"


JSON = {"Content-Type": "application/json"}
MISBEHAVING = {
    "hangs": Script([Hang()], headers=JSON),
    "redirects": Script([b""], 307, {"Location": "/allow"}),
    "answers 2 MiB": Script([b'{"allow": true, "reason": "' + b"x" * (2 << 20) + b'"}'], headers=JSON),
    "answers no JSON": Script([b"allow"], headers={"Content-Type": "text/plain"}),
    "answers a string verdict": json_script({"allow": "true"}),
}


@pytest.mark.parametrize("how", list(MISBEHAVING))
def test_a_misbehaving_webhook_fails_closed_within_its_timeout(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], how: str) -> None:
    """Fail closed (CONTRACT §5.2) whatever the webhook does: the input is refused within `timeout_s`, the
    redirect is not followed, and the model's upstream is sent nothing."""
    gw = make_gateway(config(upstream.base_url, [hook(upstream.base_url, stage="input", timeout_s=0.5)]))
    upstream.defaults["/guard"] = MISBEHAVING[how]
    upstream.defaults["/allow"] = json_script({"allow": True})
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
    t0 = time.monotonic()
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert time.monotonic() - t0 < 5
    assert info.value.code == "guardrail_blocked" and info.value.param == "hook"
    assert upstream.bodies("/v1/chat/completions") == [] and upstream.bodies("/allow") == []
    assert len(upstream.bodies("/guard")) == 1


def test_an_input_webhook_is_sent_the_prompt_as_masked_for_the_provider(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """`redaction.inputs: true` masks the prompt before it leaves the gateway: a webhook is somewhere it
    leaves for, so it is sent the masked prompt too (before, it got the key in clear while the provider got
    it masked)."""
    key = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
    cfg = config(upstream.base_url, [hook(upstream.base_url, stage="input")])
    cfg = dataclasses.replace(cfg, redaction_profiles={
        "p": dataclasses.replace(cfg.redaction_profiles["p"], inputs=True)})
    gw = make_gateway(cfg)
    upstream.defaults["/guard"] = json_script({"allow": True})
    upstream.enqueue("/v1/chat/completions", json_script({
        "id": "c", "object": "chat.completion", "created": 1, "model": "x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}))
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"my key is {key}"}])
    [sent] = upstream.bodies("/v1/chat/completions")
    assert sent["messages"][0]["content"] == "my key is [REDACTED:openai_key]"
    assert upstream.bodies("/guard") == [{"stage": "input", "model": "m",
                                          "text": "my key is [REDACTED:openai_key]"}]
