"""Mid-stream continuation on the Messages and Responses APIs (CONTRACT §4.9, issue #32), end to end with
the official anthropic and openai SDKs against scripted upstreams: a stream that fails after its first
token is continued on the next deployment (prefill, or regenerate after a prefill's 400) and the client
reads one answer with the usage of both attempts; a regenerated answer that diverges ends it with one
error event and the text already sent stands. (Chat: test_continuation_chat.py.)
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import Close, FakeUpstream, Hang, Part, Script, json_script
from tests.harness import GatewayServer
from tests.responses_scripts import USAGE, Answer, frame, rate_limit_error, stream_script

MA, MB = "/a/v1/messages", "/b/v1/messages"
RA, RB = "/a/v1/responses", "/b/v1/responses"
WHOLE = "One, two, three, four, five."
USER = [{"role": "user", "content": "count"}]


def config(url: str, kind: str, *, idle_s: float = 5, b_prefill: bool | None = None) -> Any:
    t = {"connect_s": 1, "first_token_s": 5, "idle_s": idle_s, "total_s": 30}
    root = {"anthropic": "", "openai": "/v1"}[kind]
    b: dict[str, Any] = {"provider": "b", "model": "model-b"}
    if b_prefill is not None:
        b["prefill"] = b_prefill
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "a": {"type": kind, "base_url": f"{url}/a{root}", "api_key": "ka", "timeouts": t},
            "b": {"type": kind, "base_url": f"{url}/b{root}", "api_key": "kb", "timeouts": t},
        },
        "models": [{"name": "m", "continuation": True,
                    "retry": {"max_attempts": 4, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5},
                    "deployments": [{"provider": "a", "model": "model-a"}, b]}],
    }, env={})


def raw(gw: GatewayServer, path: str, body: dict[str, Any]) -> bytes:
    req = urllib.request.Request(f"{gw.base_url}{path}", data=orjson.dumps(body),
                                 headers={"content-type": "application/json", "x-api-key": "x"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return bytes(r.read())


# -- Messages ---------------------------------------------------------------------------------------

def messages_cut(end: Part) -> Script:
    events = [a.message_start("msg_first"), *a.text_block(0, ["One, ", "two, "])[:-1]]  # the block stays open
    return Script([a.event(e) for e in events] + [end])


def messages_answer(pieces: list[str], mid: str = "msg_second") -> Script:
    return a.stream([a.message_start(mid), *a.text_block(0, pieces), a.message_delta(), a.message_stop()])


M_FAILURES = {"cut": Close(), "stall": Hang(), "inband": a.event(a.error_event())}


def anthropic_client(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key="x", max_retries=0, timeout=20)


def read_messages(gw: GatewayServer) -> tuple[str, Any]:
    with anthropic_client(gw).messages.stream(model="m", max_tokens=100, messages=USER) as s:
        text = "".join(s.text_stream)
        return text, s.get_final_message()


@pytest.mark.parametrize("how", sorted(M_FAILURES))
def test_messages_continued_by_prefill(how: str, upstream: FakeUpstream,
                                       make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, "anthropic", idle_s=0.3 if how == "stall" else 5))
    upstream.enqueue(MA, messages_cut(M_FAILURES[how]))
    upstream.enqueue(MB, messages_answer([" three, ", "four, five."]))
    text, final = read_messages(gw)
    assert text == WHOLE
    assert final.id == "msg_first" and final.stop_reason == "end_turn"
    assert [b.text for b in final.content] == [WHOLE]
    assert upstream.bodies(MB)[0]["messages"] == [*USER, {"role": "assistant", "content": "One, two,"}]
    # usage: both attempts' (each message_start: 20 input + 10 cache reads, 1 output; the second's end: 12)
    assert final.usage.output_tokens == 1 + 12
    assert final.usage.cache_read_input_tokens == 20 and final.usage.input_tokens == 40
    assert gw.sample("llm_gateway_continuations_total", mode="prefill", outcome="ok") == 1
    assert gw.sample("llm_gateway_tokens_total", provider="a", type="output") == 1
    assert gw.sample("llm_gateway_tokens_total", provider="b", type="output") == 12


@pytest.mark.parametrize("how", sorted(M_FAILURES))
def test_messages_regenerated_after_a_prefill_is_rejected(how: str, upstream: FakeUpstream,
                                                          make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, "anthropic", idle_s=0.3 if how == "stall" else 5))
    rejection = json_script({"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": "This model does not support assistant prefill"}},
                            400)
    upstream.enqueue(MA, messages_cut(M_FAILURES[how]))
    upstream.enqueue(MB, rejection, messages_answer(["One, two", ", three, four, five."]))
    text, final = read_messages(gw)
    assert text == WHOLE and final.id == "msg_first"
    assert upstream.bodies(MB)[1]["messages"] == USER
    assert gw.sample("llm_gateway_learned_fallbacks", deployment="b/model-b", api="messages", fact="no_prefill") == 1


@pytest.mark.parametrize("how", sorted(M_FAILURES))
def test_messages_a_diverging_regeneration_ends_with_one_error(how: str, upstream: FakeUpstream,
                                                               make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, "anthropic", b_prefill=False, idle_s=0.3 if how == "stall" else 5))
    upstream.enqueue(MA, messages_cut(M_FAILURES[how]))
    upstream.enqueue(MB, messages_answer(["Two, one."]))
    seen: list[str] = []
    with pytest.raises(anthropic.APIError), anthropic_client(gw).messages.stream(
            model="m", max_tokens=100, messages=USER) as s:
        for piece in s.text_stream:
            seen.append(piece)
    assert "".join(seen) == "One, two, "
    assert gw.sample("llm_gateway_continuations_total", mode="regenerate", outcome="diverged") == 1
    upstream.enqueue(MA, messages_cut(M_FAILURES[how]))
    upstream.enqueue(MB, messages_answer(["Two, one."]))
    body = raw(gw, "/messages", {"model": "m", "max_tokens": 100, "stream": True, "messages": USER})
    assert body.count(b"event: error") == 1 and b"message_stop" not in body and b"Two" not in body


def test_messages_a_failure_inside_a_tool_call_is_not_continued(upstream: FakeUpstream,
                                                                make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, "anthropic"))
    events = [a.message_start(), *a.tool_block(0, "toolu_1", "f", ['{"a":'])[:-1]]
    upstream.enqueue(MA, Script([a.event(e) for e in events] + [Close()]))
    with pytest.raises(anthropic.APIError), anthropic_client(gw).messages.stream(
            model="m", max_tokens=100, messages=USER) as s:
        s.until_done()
    assert upstream.bodies(MB) == []


# -- Responses --------------------------------------------------------------------------------------

def responses_cut(end: Part) -> Script:
    events = Answer().message(["One, ", "two, ", "unsent"]).stream_events()[:6]  # through the second delta
    return stream_script(events, tail=[end])


R_FAILURES = {"cut": Close(), "stall": Hang(), "inband": frame(rate_limit_error(6))}


def read_responses(gw: GatewayServer) -> tuple[str, Any]:
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", timeout=30, max_retries=0)
    events = list(client.responses.create(model="m", input="count", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert [e.sequence_number for e in events] == list(range(len(events)))  # one lifecycle
    return text, events[-1]


@pytest.mark.parametrize("how", sorted(R_FAILURES))
def test_responses_continued_by_prefill(how: str, upstream: FakeUpstream,
                                        make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, "openai", idle_s=0.3 if how == "stall" else 5, b_prefill=True))
    upstream.enqueue(RA, responses_cut(R_FAILURES[how]))
    upstream.enqueue(RB, stream_script(Answer("resp_b").message([" three, ", "four, five."]).stream_events()))
    text, last = read_responses(gw)
    assert text == WHOLE
    assert last.type == "response.completed" and last.response.id == "resp_up"
    assert last.response.output_text == WHOLE
    assert last.response.usage.input_tokens == USAGE["input_tokens"]  # the first attempt reported none
    sent = upstream.bodies(RB)[0]["input"]
    assert sent[0] == {"role": "user", "content": "count"}
    assert sent[-1] == {"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "One, two,"}]}
    assert gw.sample("llm_gateway_continuations_total", mode="prefill", outcome="ok") == 1


@pytest.mark.parametrize("how", sorted(R_FAILURES))
def test_responses_regenerated_after_a_prefill_is_rejected(how: str, upstream: FakeUpstream,
                                                           make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, "openai", b_prefill=True, idle_s=0.3 if how == "stall" else 5))
    rejection = json_script({"error": {"message": "assistant prefill unsupported", "type": "invalid_request_error",
                                       "param": "input", "code": None}}, 400)
    upstream.enqueue(RA, responses_cut(R_FAILURES[how]))
    upstream.enqueue(RB, rejection, stream_script(Answer("resp_b").message(["One, two, three", ", four, five."])
                                                  .stream_events()))
    text, last = read_responses(gw)
    assert text == WHOLE and last.response.output_text == WHOLE
    assert upstream.bodies(RB)[1]["input"] == "count"


@pytest.mark.parametrize("how", sorted(R_FAILURES))
def test_responses_a_diverging_regeneration_ends_with_one_error(how: str, upstream: FakeUpstream,
                                                                make_gateway: Callable[..., GatewayServer]) -> None:
    # an openai deployment does not prefill by default
    gw = make_gateway(config(upstream.base_url, "openai", idle_s=0.3 if how == "stall" else 5))
    upstream.enqueue(RA, responses_cut(R_FAILURES[how]))
    upstream.enqueue(RB, stream_script(Answer("resp_b").message(["Five, four."]).stream_events()))
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", timeout=30, max_retries=0)
    seen: list[Any] = []
    with pytest.raises(openai.APIError):
        for e in client.responses.create(model="m", input="count", stream=True):
            seen.append(e)
    assert "".join(e.delta for e in seen if e.type == "response.output_text.delta") == "One, two, "
    assert gw.sample("llm_gateway_continuations_total", mode="regenerate", outcome="diverged") == 1
    upstream.enqueue(RA, responses_cut(R_FAILURES[how]))
    upstream.enqueue(RB, stream_script(Answer("resp_b").message(["Five, four."]).stream_events()))
    body = raw(gw, "/responses", {"model": "m", "input": "count", "stream": True})
    assert body.count(b"event: error") == 1 and b"response.completed" not in body and b"Five" not in body
