"""The Google translator (gateway.providers.convert.google_*): Chat Completions requests to
generateContent bodies, GenerateContentResponses (streamed and whole) to OpenAI shapes and typed events,
and Google errors classified by their `status` field."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.apis.messages import read_answer
from gateway.core.chat.assemble import ChatAssembler
from gateway.core.events import (
    MAX_TOKEN_COUNT,
    DeltaKind,
    FailureKind,
    Finish,
    InbandError,
    OutputDelta,
    StreamEvent,
    Usage,
)
from gateway.core.sse import SSEDecoder
from gateway.providers.base import ChatChunk
from gateway.providers.convert.google_errors import classify_google_http_error
from gateway.providers.convert.google_request import UNSIGNED_THOUGHT, google_body
from gateway.providers.convert.google_stream import GoogleStreamParser, parse_google_body
from gateway.providers.messages_gemini import GeminiMessages
from gateway.providers.settings import ProviderConfig
from tests import google_scripts as g
from tests.unit.test_fidelity_chat import through_gateway

CREATED = 1_750_000_000


def feed(parts: list[bytes]) -> list[ChatChunk]:
    parser, dec, out = GoogleStreamParser(CREATED), SSEDecoder(), []
    for p in parts:
        for ev in dec.feed(p):
            out += parser.parse(ev)
    return out


def events(chunks: list[ChatChunk]) -> list[StreamEvent]:
    return [e for c in chunks for e in c.events]


def assembled(chunks: list[ChatChunk]) -> tuple[dict[str, Any], Usage | None]:
    asm = ChatAssembler()
    asm.feed(events(chunks))
    return asm.completion(id="x", model="m", created=1)["choices"][0], asm.usage


# --- requests ---------------------------------------------------------------------------------------

def test_messages_roles_system_and_tool_round_trip() -> None:
    body = {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Use metric."}]},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA="}},
                                     {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}},
            {"id": "c2", "type": "function", "function": {"name": "clock", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 3}'},
        {"role": "tool", "tool_call_id": "c2", "content": "12:00"},
    ]}
    out = google_body(body)
    assert out["systemInstruction"] == {"parts": [{"text": "Be brief."}, {"text": "Use metric."}]}
    assert out["contents"] == [
        {"role": "user", "parts": [{"text": "Weather?"}, {"inlineData": {"mimeType": "image/png", "data": "AAA="}},
                                   {"fileData": {"mimeType": "image/png", "fileUri": "https://x.test/a.png"}}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}, "thoughtSignature": UNSIGNED_THOUGHT},
            {"functionCall": {"name": "clock", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"temp": 3}}},
                                   {"functionResponse": {"name": "clock", "response": {"result": "12:00"}}}]},
    ]


def test_parameters_tools_and_tool_choice() -> None:
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False}
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.3, "top_p": 0.9, "max_tokens": 50,
            "stop": ["END"], "seed": 7, "n": 2, "logit_bias": {"1": 1}, "user": "u",
            "tools": [{"type": "function", "function": {"name": "weather", "description": "d", "parameters": params}},
                      {"type": "function", "function": {"name": "noargs", "parameters": {"type": "object",
                                                                                          "properties": {}}}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}}
    out = google_body(body)
    assert out["tools"] == [{"functionDeclarations": [
        {"name": "weather", "description": "d", "parametersJsonSchema": params}, {"name": "noargs"}]}]
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}}
    assert out["generationConfig"] == {"temperature": 0.3, "topP": 0.9, "seed": 7, "maxOutputTokens": 50,
                                       "stopSequences": ["END"], "responseMimeType": "application/json",
                                       "responseJsonSchema": {"type": "object"}}
    assert set(out) == {"contents", "tools", "toolConfig", "generationConfig"}


@pytest.mark.parametrize(("choice", "mode"), [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")])
def test_tool_choice_modes(choice: str, mode: str) -> None:
    body = {"messages": [], "tool_choice": choice, "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert google_body(body)["toolConfig"] == {"functionCallingConfig": {"mode": mode}}


def test_reasoning_effort_and_anthropic_thinking_become_thinking_config() -> None:
    assert google_body({"messages": [], "reasoning_effort": "low"})["generationConfig"] == {
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024}}
    thinking = {"type": "enabled", "budget_tokens": 2000}
    assert google_body({"messages": [], "thinking": thinking, "reasoning_effort": "high"})["generationConfig"] == {
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 2000}}
    assert "generationConfig" not in google_body({"messages": [], "thinking": {"type": "disabled"}})


# --- streams ----------------------------------------------------------------------------------------

STREAM = g.sse([
    g.response([g.text("Plan the ", thought=True)], usage=g.usage(candidates=0)),
    g.response([g.text("calls.", thought=True), g.text("Checking — één 🙂 ")], usage=g.usage(candidates=2)),
    g.response([g.call("weather", {"city": "Oslo"}), g.call("weather", {"city": "Paris"}, ident="fc-2")]),
    g.response([], "STOP", g.usage(prompt=40, candidates=9, cached=30, thoughts=4)),
])


def test_stream_text_thoughts_calls_usage() -> None:
    chunks = feed([STREAM])
    first = chunks[0].obj
    assert first is not None and first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert (first["id"], first["model"], first["created"]) == (g.RESPONSE_ID, g.MODEL, CREATED)
    choice, usage = assembled(chunks)
    msg = choice["message"]
    assert msg["content"] == "Checking — één 🙂 "
    assert msg["reasoning_content"] == "Plan the calls."
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]]
    assert calls == [("weather", '{"city":"Oslo"}'), ("weather", '{"city":"Paris"}')]
    assert msg["tool_calls"][1]["id"] == "fc-2" and msg["tool_calls"][0]["id"].startswith("call_")
    assert choice["finish_reason"] == "tool_calls"
    assert usage == Usage(input=40, output=13, cached_input=30, reasoning=4)


def test_stream_at_every_split_gives_the_same_chunks() -> None:
    whole = feed([STREAM])
    for i in range(1, len(STREAM)):
        assert feed([STREAM[:i], STREAM[i:]]) == whole, i


def test_synthesized_call_ids_agree_between_stream_and_body() -> None:
    resp = g.response([g.call("f", {})], "STOP", g.usage())
    streamed, _ = assembled(feed([g.sse([resp])]))
    body = parse_google_body(orjson.dumps(resp), CREATED).obj
    assert streamed["message"]["tool_calls"][0]["id"] == body["choices"][0]["message"]["tool_calls"][0]["id"]


@pytest.mark.parametrize(("reason", "finish"), [("STOP", "stop"), ("MAX_TOKENS", "length"),
                                                ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
                                                ("PROHIBITED_CONTENT", "content_filter"), ("NEW_REASON", "stop")])
def test_finish_reasons(reason: str, finish: str) -> None:
    choice, _ = assembled(feed([g.sse([g.response([g.text("a")], reason, g.usage())])]))
    assert choice["finish_reason"] == finish


def test_a_filtered_finish_without_text_is_a_refusal() -> None:
    chunks = feed([g.sse([g.response([], "SAFETY", g.usage(candidates=0))])])
    refusal = [e for e in events(chunks) if isinstance(e, OutputDelta)]
    assert [e.kind for e in refusal] == [DeltaKind.REFUSAL] and "SAFETY" in refusal[0].text
    assert [e.reason for e in events(chunks) if isinstance(e, Finish)] == ["content_filter"]


def test_a_blocked_prompt_is_a_refusal() -> None:
    blocked = g.response(usage=g.usage(candidates=0), promptFeedback={"blockReason": "PROHIBITED_CONTENT"})
    choice, usage = assembled(feed([g.sse([blocked])]))
    assert "PROHIBITED_CONTENT" in choice["message"]["refusal"]
    assert choice["finish_reason"] == "content_filter" and usage == Usage(input=10)


def test_an_end_without_finish_reason_is_not_finished() -> None:
    parser = GoogleStreamParser(CREATED)
    for ev in SSEDecoder().feed(g.sse([g.response([g.text("cut")], usage=g.usage())])):
        parser.parse(ev)
    assert not parser.finished


@pytest.mark.parametrize(("status", "code", "kind"), [
    ("RESOURCE_EXHAUSTED", 429, FailureKind.INBAND), ("UNAVAILABLE", 503, FailureKind.INBAND),
    ("INVALID_ARGUMENT", 400, FailureKind.HTTP_4XX), ("PERMISSION_DENIED", 403, FailureKind.UPSTREAM_AUTH),
    ("FAILED_PRECONDITION", 400, FailureKind.QUOTA)])
def test_inband_error_by_status(status: str, code: int, kind: FailureKind) -> None:
    chunks = feed([g.sse([g.error(status, code, "words that must not matter")])])
    err = events(chunks)[0]
    assert isinstance(err, InbandError) and err.failure.kind is kind and err.failure.code == status


def test_absurd_usage_counts_still_make_a_stream() -> None:
    """Counts whose sum passes 64 bits (each one still parses as a JSON integer): the chat stream's usage
    chunk is written, bounded, instead of failing to encode."""
    huge = {"promptTokenCount": 2**64 - 1, "candidatesTokenCount": 2**64 - 1, "thoughtsTokenCount": 2**64 - 1}
    out = b"".join(through_gateway(GoogleStreamParser(CREATED), [g.sse([g.response([g.text("hi")], "STOP", huge)])]))
    usage = [c["usage"] for c in map(orjson.loads, (e.data for e in SSEDecoder().feed(out) if e.data != b"[DONE]"))
             if c.get("usage")]
    assert usage[-1]["completion_tokens"] == MAX_TOKEN_COUNT


def test_garbage_event_is_malformed() -> None:
    err = events(feed([b"data: <html>\n\n"]))[0]
    assert isinstance(err, InbandError) and err.failure.kind is FailureKind.MALFORMED


# --- bodies and HTTP errors -------------------------------------------------------------------------

def test_body_becomes_a_chat_completion_and_reads_back_the_same() -> None:
    resp = g.response([g.text("Thinking.", thought=True), g.text("Hi"), g.call("f", {"a": 1}, "id1")], "STOP",
                      g.usage(prompt=7, candidates=3, cached=2, thoughts=1))
    parsed = parse_google_body(orjson.dumps(resp), CREATED)
    msg = parsed.obj["choices"][0]["message"]
    assert (msg["content"], msg["reasoning_content"]) == ("Hi", "Thinking.")
    assert msg["tool_calls"] == [{"id": "id1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]
    assert parsed.obj["choices"][0]["finish_reason"] == "tool_calls"
    assert parsed.obj["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    assert Usage(input=7, output=4, cached_input=2, reasoning=1) in parsed.events
    again = parse_google_body(orjson.dumps(parsed.obj), CREATED)
    assert again.obj["choices"][0]["message"]["content"] == "Hi"


def test_a_body_to_a_messages_client_keeps_the_reasoning_count() -> None:
    """Anthropic's usage has no reasoning field: the thoughts go as `output_tokens_details.thinking_tokens`,
    which the Messages API's accounting reads."""
    resp = g.response([g.text("Hmm.", thought=True), g.text("Hi")], "STOP", g.usage(prompt=7, candidates=3, thoughts=2))
    msg = GeminiMessages(ProviderConfig("gem", "gemini", "http://up", "k")).parse_body(orjson.dumps(resp)).obj
    assert read_answer(msg).usage == Usage(input=7, output=5, reasoning=2)


def test_error_and_garbage_bodies() -> None:
    err = parse_google_body(orjson.dumps(g.error("UNAVAILABLE", 503)), CREATED).events[0]
    assert isinstance(err, InbandError) and err.failure.kind is FailureKind.INBAND
    bad = parse_google_body(b"<html>", CREATED).events[0]
    assert isinstance(bad, InbandError) and bad.failure.kind is FailureKind.MALFORMED


@pytest.mark.parametrize(("status", "body", "kind"), [
    (429, g.error("RESOURCE_EXHAUSTED", 429), FailureKind.HTTP_429),
    (503, g.error("UNAVAILABLE", 503), FailureKind.HTTP_5XX),
    (500, g.error("INTERNAL", 500), FailureKind.HTTP_5XX),
    (400, g.error("INVALID_ARGUMENT", 400), FailureKind.HTTP_4XX),
    (403, g.error("PERMISSION_DENIED", 403), FailureKind.UPSTREAM_AUTH),
    (401, g.error("UNAUTHENTICATED", 401), FailureKind.UPSTREAM_AUTH),
    (404, g.error("NOT_FOUND", 404), FailureKind.NOT_FOUND),
    (400, g.error("RESOURCE_EXHAUSTED", 400), FailureKind.HTTP_429),  # the status field decides
    (400, g.error("INVALID_ARGUMENT", 400, reason="API_KEY_INVALID"), FailureKind.UPSTREAM_AUTH),
    # our project's state, not the request: the Gemini API's "User location is not supported" (no billing)
    (400, g.error("FAILED_PRECONDITION", 400, "User location is not supported for the API use."), FailureKind.QUOTA),
    (502, "<html>bad gateway</html>", FailureKind.HTTP_5XX),
    (404, "", FailureKind.NOT_FOUND),
])
def test_http_errors_by_status_field(status: int, body: Any, kind: FailureKind) -> None:
    raw = body.encode() if isinstance(body, str) else orjson.dumps(body)
    assert classify_google_http_error(status, {}, raw).kind is kind


def test_retry_info_and_pass_through_shape() -> None:
    f = classify_google_http_error(429, {}, orjson.dumps(g.error("RESOURCE_EXHAUSTED", 429, retry_s="27s")))
    assert f.retry_after_s == 27.0
    f = classify_google_http_error(429, {"retry-after": "3"}, orjson.dumps(g.error("RESOURCE_EXHAUSTED", 429)))
    assert f.retry_after_s == 3.0
    bad = classify_google_http_error(400, {}, orjson.dumps(g.error("INVALID_ARGUMENT", 400, "bad field x")))
    assert (bad.message, bad.status, bad.code, bad.type) == ("bad field x", 400, "INVALID_ARGUMENT",
                                                             "invalid_request_error")


def test_calls_of_answers_without_a_response_id_never_share_an_id() -> None:
    resp = {k: v for k, v in g.response([g.call("f", {})], "STOP").items() if k != "responseId"}
    ids = {parse_google_body(orjson.dumps(resp), CREATED).obj["choices"][0]["message"]["tool_calls"][0]["id"]
           for _ in range(2)}
    assert len(ids) == 2
