"""The bedrock cells, sans I/O: request URLs and bodies (InvokeModel for Claude, Converse otherwise), the
event-stream answers read through the transcoder and the parsers at every split, exception frames
before and after the first token classified into the retry rules, HTTP errors, non-stream bodies."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.events import (
    DeltaKind,
    FailureKind,
    Finish,
    InbandError,
    OutputDelta,
    StreamEvent,
    ToolCallDelta,
    Usage,
)
from gateway.core.eventstream import BedrockStreamTranscoder
from gateway.core.policy.retry import Action, AttemptState, RetryPolicy, decide
from gateway.core.sse import SSEDecoder, SSEEvent
from gateway.providers.chat_bedrock import BedrockChat
from gateway.providers.convert.bedrock_converse import converse_body
from gateway.providers.messages_bedrock import BedrockMessages
from gateway.providers.settings import AwsSettings, ProviderConfig
from tests.eventstream_frames import chunk, event, exception

PROVIDER = ProviderConfig(name="bedrock-us", type="bedrock", base_url="https://bedrock-runtime.us-east-1.amazonaws.com",
                          aws=AwsSettings(region="us-east-1"))
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
NOVA = "amazon.nova-pro-v1:0"
CHAT = {"model": "m", "stream": True, "messages": [{"role": "system", "content": "be brief"},
                                                   {"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
        "tool_choice": "required", "max_tokens": 100}

CLAUDE_STREAM = [
    {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                          "model": "claude", "stop_reason": None, "stop_sequence": None,
                                          "usage": {"input_tokens": 5, "cache_read_input_tokens": 100,
                                                    "cache_creation_input_tokens": 7, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "get",
                                                                  "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a":1}'}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 5, "outputTokenCount": 9}},
]
CONVERSE_STREAM: list[tuple[str, Any]] = [
    ("messageStart", {"role": "assistant"}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hmm"}}}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig"}}}),
    ("contentBlockStop", {"contentBlockIndex": 0}),
    ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Hello"}}),
    ("contentBlockStop", {"contentBlockIndex": 1}),
    ("contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t1", "name": "get"}}}),
    ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '{"a":1}'}}}),
    ("contentBlockStop", {"contentBlockIndex": 2}),
    ("messageStop", {"stopReason": "tool_use"}),
    ("metadata", {"usage": {"inputTokens": 5, "outputTokens": 9, "totalTokens": 121, "cacheReadInputTokens": 100,
                            "cacheWriteInputTokens": 7}, "metrics": {"latencyMs": 10}}),
]
WANT_USAGE = Usage(input=112, output=9, cached_input=100, cache_creation_input=7)


def test_claude_chat_request_goes_to_invoke_model() -> None:
    req = BedrockChat(PROVIDER).request(CHAT, CLAUDE, stream=True, client_headers={}, send_stream_options=True)
    assert req.url == ("https://bedrock-runtime.us-east-1.amazonaws.com/model/"
                       "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream")
    assert req.headers["accept"] == "application/vnd.amazon.eventstream"
    body = orjson.loads(req.body)
    assert body["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in body and "stream" not in body
    assert body["system"] == [{"type": "text", "text": "be brief"}] or body["system"] == "be brief"
    assert body["tool_choice"] == {"type": "any"}
    plain = BedrockChat(PROVIDER).request(CHAT, CLAUDE, stream=False, client_headers={}, send_stream_options=False)
    assert plain.url.endswith("%3A0/invoke") and plain.headers["accept"] == "application/json"


def test_other_models_go_to_converse() -> None:
    req = BedrockChat(PROVIDER).request(CHAT, NOVA, stream=True, client_headers={}, send_stream_options=True)
    assert req.url.endswith("/model/amazon.nova-pro-v1%3A0/converse-stream")
    body = orjson.loads(req.body)
    assert body == {"messages": [{"role": "user", "content": [{"text": "hi"}]}], "system": [{"text": "be brief"}],
                    "inferenceConfig": {"maxTokens": 100},
                    "toolConfig": {"tools": [{"toolSpec": {"name": "get",
                                                           "inputSchema": {"json": {"type": "object"}}}}],
                                   "toolChoice": {"any": {}}}}
    assert BedrockChat(PROVIDER).request(CHAT, NOVA, stream=False, client_headers={},
                                         send_stream_options=False).url.endswith("/converse")


def test_messages_request_is_native_with_betas_in_the_body() -> None:
    body = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 50, "metadata": {"user_id": "u"},
            "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [{"role": "user", "content": "hi"}]}
    req = BedrockMessages(PROVIDER).request(body, CLAUDE, stream=True,
                                            client_headers={"anthropic-beta": "a-2025, b-2025"},
                                            send_stream_options=True)
    sent = orjson.loads(req.body)
    assert sent == {"max_tokens": 50, "metadata": {"user_id": "u"}, "thinking": body["thinking"],
                    "messages": body["messages"], "anthropic_version": "bedrock-2023-05-31",
                    "anthropic_beta": ["a-2025", "b-2025"]}
    conv = orjson.loads(BedrockMessages(PROVIDER).request(body, NOVA, stream=False, client_headers={},
                                                          send_stream_options=False).body)
    assert conv["messages"] == [{"role": "user", "content": [{"text": "hi"}]}]


def test_inference_profile_arn_is_encoded_whole() -> None:
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x-v1:0"
    url = BedrockChat(PROVIDER).request(CHAT, arn, stream=False, client_headers={}, send_stream_options=False).url
    assert url.endswith("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
                        "us.anthropic.claude-x-v1%3A0/invoke")


def claude_frames() -> bytes:
    return b"".join(chunk(e) for e in CLAUDE_STREAM)


def converse_frames() -> bytes:
    return b"".join(event(n, p) for n, p in CONVERSE_STREAM)


def chat_events(raw: bytes, cut: int) -> list[StreamEvent]:
    coder, dec, parser = BedrockStreamTranscoder(), SSEDecoder(), BedrockChat(PROVIDER).stream_parser()
    out: list[StreamEvent] = []
    for piece in (raw[:cut], raw[cut:]):
        for sse in dec.feed(coder.feed(piece)):
            for c in parser.parse(sse):
                out += c.events
    return out


def merged(events: list[StreamEvent]) -> list[Any]:
    """Text and arguments joined; the last usage."""
    text = "".join(e.text for e in events if isinstance(e, OutputDelta) and e.kind is DeltaKind.CONTENT)
    thinking = "".join(e.text for e in events if isinstance(e, OutputDelta) and e.kind is DeltaKind.REASONING)
    calls = [(e.id, e.name) for e in events if isinstance(e, ToolCallDelta) and e.id]
    args = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    finishes = [e.reason for e in events if isinstance(e, Finish)]
    usage = [e for e in events if isinstance(e, Usage)][-1]
    return [text, thinking, calls, args, finishes, usage]


@pytest.mark.parametrize("frames", [claude_frames, converse_frames])
def test_chat_streams_at_every_split(frames: Any) -> None:
    raw = frames()
    whole = merged(chat_events(raw, len(raw)))
    assert whole[0] == "Hello" and whole[2] == [("t1", "get")] and whole[3] == '{"a":1}'
    assert whole[4] == ["tool_calls"] and whole[5] == WANT_USAGE
    for cut in range(0, len(raw) + 1, 3):
        assert merged(chat_events(raw, cut)) == whole


def test_converse_reasoning_is_reasoning() -> None:
    assert merged(chat_events(converse_frames(), 0))[1] == "hmm"


def messages_events(raw: bytes) -> list[Any]:
    coder, dec, parser = BedrockStreamTranscoder(), SSEDecoder(), BedrockMessages(PROVIDER).stream_parser()
    evs = [ev for sse in dec.feed(coder.feed(raw)) for ev in parser.parse(sse)]
    return [*evs, *parser.finish()]


def test_messages_stream_claude_native_converse_translated() -> None:
    claude = BedrockMessages(PROVIDER).stream_parser()
    assert claude.native is False  # until the stream shows whose it is
    dec, coder = SSEDecoder(), BedrockStreamTranscoder()
    for sse in dec.feed(coder.feed(claude_frames())):
        claude.parse(sse)
    assert claude.native is True
    types = [e.type for e in messages_events(converse_frames())]
    assert types == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                     "message_stop"]
    last_delta = next(e for e in messages_events(converse_frames()) if e.type == "message_delta")
    assert last_delta.obj["usage"] == {"input_tokens": 5, "output_tokens": 9, "cache_read_input_tokens": 100,
                                       "cache_creation_input_tokens": 7}
    assert last_delta.obj["delta"]["stop_reason"] == "tool_use"


def test_converse_stream_without_metadata_finishes_at_the_end() -> None:
    raw = b"".join(event(n, p) for n, p in CONVERSE_STREAM[:-1])
    assert [e.type for e in messages_events(raw)][-2:] == ["message_delta", "message_stop"]


POLICY = RetryPolicy(max_attempts=4, per_deployment=2)


def decision(name: str, after_first_token: bool) -> tuple[FailureKind, Action]:
    """An exception frame after a message start (and after a text delta when `after_first_token`)."""
    raw = chunk(CLAUDE_STREAM[0]) + (chunk(CLAUDE_STREAM[2]) if after_first_token else b"") + exception(name)
    errors = [e for e in chat_events(raw, len(raw)) if isinstance(e, InbandError)]
    assert len(errors) == 1
    f = errors[0].failure
    state = AttemptState(attempts_total=1, attempts_on_deployment=1, has_next_deployment=True,
                         first_token_sent=after_first_token)
    return f.kind, decide(f, state, POLICY, lambda: 0.5).action


@pytest.mark.parametrize(("name", "kind", "action"), [
    ("throttlingException", FailureKind.INBAND, Action.RETRY_SAME),
    ("serviceUnavailableException", FailureKind.INBAND, Action.RETRY_SAME),
    ("internalServerException", FailureKind.INBAND, Action.RETRY_SAME),
    ("modelStreamErrorException", FailureKind.INBAND, Action.RETRY_SAME),
    ("validationException", FailureKind.HTTP_4XX, Action.PASS_THROUGH),
    ("accessDeniedException", FailureKind.UPSTREAM_AUTH, Action.NEXT),
    ("serviceQuotaExceededException", FailureKind.QUOTA, Action.NEXT),
])
def test_exception_frames_before_the_first_token(name: str, kind: FailureKind, action: Action) -> None:
    assert decision(name, after_first_token=False) == (kind, action)


def test_exception_frame_after_the_first_token_is_not_retried() -> None:
    assert decision("throttlingException", after_first_token=True) == (FailureKind.INBAND, Action.GIVE_UP)


@pytest.mark.parametrize(("status", "headers", "body", "kind", "code"), [
    (429, {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"},
     {"message": "Too many requests"}, FailureKind.HTTP_429, "ThrottlingException"),
    (400, {}, {"__type": "com.amazon.coral.validate#ValidationException", "message": "bad"}, FailureKind.HTTP_4XX,
     "ValidationException"),
    (403, {"x-amzn-errortype": "AccessDeniedException:"}, {"message": "no"}, FailureKind.UPSTREAM_AUTH,
     "AccessDeniedException"),
    (403, {"x-amzn-errortype": "InvalidSignatureException:"}, {"message": "sig"}, FailureKind.UPSTREAM_AUTH,
     "InvalidSignatureException"),
    (404, {"x-amzn-errortype": "ResourceNotFoundException:"}, {"message": "model"}, FailureKind.NOT_FOUND,
     "ResourceNotFoundException"),
    (400, {"x-amzn-errortype": "ServiceQuotaExceededException:"}, {"message": "q"}, FailureKind.QUOTA,
     "ServiceQuotaExceededException"),
    (503, {"x-amzn-errortype": "ServiceUnavailableException:"}, {"message": "u"}, FailureKind.HTTP_5XX,
     "ServiceUnavailableException"),
    (424, {"x-amzn-errortype": "ModelErrorException:"}, {"message": "m"}, FailureKind.HTTP_5XX, "ModelErrorException"),
    (502, {}, None, FailureKind.HTTP_5XX, None),
    # AWS's common errors: our signature, credentials or clock, though several come as 400s
    (400, {"x-amzn-errortype": "IncompleteSignatureException:"}, {"message": "s"}, FailureKind.UPSTREAM_AUTH,
     "IncompleteSignatureException"),
    (400, {}, {"__type": "com.amazon.coral.service#RequestExpired", "message": "e"}, FailureKind.UPSTREAM_AUTH,
     "RequestExpired"),
    (400, {"x-amzn-errortype": "NotAuthorized"}, {"message": "n"}, FailureKind.UPSTREAM_AUTH, "NotAuthorized"),
    (403, {"x-amzn-errortype": "MissingAuthenticationTokenException:"}, {"message": "m"},
     FailureKind.UPSTREAM_AUTH, "MissingAuthenticationTokenException"),
])
def test_http_errors(status: int, headers: dict[str, str], body: Any, kind: FailureKind, code: str | None) -> None:
    raw = orjson.dumps(body) if body is not None else b"<html>bad gateway</html>"
    f = BedrockChat(PROVIDER).classify_http_error(status, headers, raw)
    assert (f.kind, f.code, f.status) == (kind, code, status)


def test_retry_after_is_kept() -> None:
    f = BedrockChat(PROVIDER).classify_http_error(429, {"x-amzn-errortype": "ThrottlingException", "retry-after": "3"},
                                                  b"{}")
    assert f.retry_after_s == 3.0


CONVERSE_BODY = {"output": {"message": {"role": "assistant", "content": [
    {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}}, {"text": "Hi"},
    {"toolUse": {"toolUseId": "t1", "name": "get", "input": {"a": 1}}}]}},
    "stopReason": "tool_use", "usage": {"inputTokens": 5, "outputTokens": 9, "totalTokens": 121,
                                        "cacheReadInputTokens": 100, "cacheWriteInputTokens": 7}}


def test_a_marker_inside_a_tool_result_becomes_a_cache_point_after_it() -> None:
    """Converse has no cache point inside a toolResult: a marker on its content (Claude Code marks its
    latest tool result) is the one after the block, as a marker on the block itself is."""
    mark = {"type": "ephemeral"}
    marked = [{"type": "text", "text": "out", "cache_control": mark}]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": marked}
    plain = {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "out"}]}
    body = converse_body({"max_tokens": 5, "messages": [
        {"role": "user", "content": [result, plain]}, {"role": "user", "content": [{**plain, "cache_control": mark}]}]})
    kinds = [[next(iter(b)) for b in m["content"]] for m in body["messages"]]
    assert kinds == [["toolResult", "cachePoint", "toolResult"], ["toolResult", "cachePoint"]]


def test_a_deeper_marker_in_a_tool_result_is_the_cache_point_after_it_one_with_no_place_is_counted() -> None:
    """A marker on a search_result inside a tool_result, or on a text inside that search_result, is inside
    the toolResult too: the cachePoint after it stands for it. One inside a message-level search_result
    (no Converse form: the block is dropped) has no place: dropped, and counted with `fit`'s."""
    mark = {"type": "ephemeral"}
    text = {"type": "text", "text": "found"}
    found = {"type": "search_result", "source": "s", "title": "t", "content": [text]}
    found_marked_inside = {**found, "content": [{**text, "cache_control": mark}]}
    deep = [{"type": "tool_result", "tool_use_id": "t1", "content": [{**found, "cache_control": mark}]},
            {"type": "tool_result", "tool_use_id": "t2", "content": [found_marked_inside]}]
    body = {"max_tokens": 5, "messages": [{"role": "user", "content": deep}, {"role": "user", "content": [
        found_marked_inside, {"type": "text", "text": "next"}]}]}
    req = BedrockMessages(PROVIDER).request(body, NOVA, stream=False, client_headers={}, send_stream_options=False)
    kinds = [[next(iter(b)) for b in m["content"]] for m in orjson.loads(req.body)["messages"]]
    assert kinds == [["toolResult", "cachePoint", "toolResult", "cachePoint"], ["text"]]
    assert req.cache_markers_dropped == 1


def test_a_marker_on_a_block_converse_drops_is_no_cache_point_and_is_counted() -> None:
    """A marked block with no Converse form (a search_result, an image by URL) is dropped with its marker: a
    cachePoint after nothing would open the message (Bedrock refuses a content list that starts with one)."""
    mark = {"type": "ephemeral"}
    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}, "cache_control": mark}
    found = {"type": "search_result", "source": "s", "title": "t", "content": [{"type": "text", "text": "x"}],
             "cache_control": mark}
    body = {"max_tokens": 5, "messages": [{"role": "user", "content": [
        url_image, found, {"type": "text", "text": "hi", "cache_control": mark}]}]}
    req = BedrockMessages(PROVIDER).request(body, NOVA, stream=False, client_headers={}, send_stream_options=False)
    assert [next(iter(b)) for b in orjson.loads(req.body)["messages"][0]["content"]] == ["text", "cachePoint"]
    assert req.cache_markers_dropped == 2


def test_a_top_level_cache_control_is_a_cache_point_after_the_last_block() -> None:
    """Anthropic's automatic caching (a top-level `cache_control`: a breakpoint on the last block) asks for
    the same on Converse: one cachePoint after the last message's last block, not two when it is marked."""
    mark = {"type": "ephemeral"}
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"},
             {"role": "user", "content": [{"type": "text", "text": "more"}]}]
    req = BedrockMessages(PROVIDER).request({"max_tokens": 5, "cache_control": mark, "messages": turns}, NOVA,
                                            stream=False, client_headers={}, send_stream_options=False)
    kinds = [[next(iter(b)) for b in m["content"]] for m in orjson.loads(req.body)["messages"]]
    assert kinds == [["text"], ["text"], ["text", "cachePoint"]]
    assert req.cache_markers_dropped == 0
    turns[-1] = {"role": "user", "content": [{"type": "text", "text": "more", "cache_control": mark}]}
    body = converse_body({"max_tokens": 5, "cache_control": mark, "messages": turns})
    assert [next(iter(b)) for b in body["messages"][-1]["content"]] == ["text", "cachePoint"]


def test_a_chat_clients_marker_on_an_image_by_url_is_counted_as_dropped_too() -> None:
    """The chat cell (and the Responses bridge over it) counts what Converse has no place for, as the
    Messages cell does: the log line's `cache_markers_dropped` names clients whose markers are lost."""
    mark = {"type": "ephemeral"}
    chat = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}, "cache_control": mark},
        {"type": "text", "text": "hi", "cache_control": mark}]}]}
    req = BedrockChat(PROVIDER).request(chat, NOVA, stream=False, client_headers={}, send_stream_options=False)
    assert [next(iter(b)) for b in orjson.loads(req.body)["messages"][0]["content"]] == ["text", "cachePoint"]
    assert req.cache_markers_dropped == 1


def test_converse_body_to_chat_completion() -> None:
    parsed = BedrockChat(PROVIDER).parse_body(orjson.dumps(CONVERSE_BODY))
    msg = parsed.obj["choices"][0]["message"]
    assert msg["content"] == "Hi" and msg["reasoning_content"] == "hmm"
    assert msg["tool_calls"][0]["function"] == {"name": "get", "arguments": '{"a":1}'}
    assert parsed.obj["choices"][0]["finish_reason"] == "tool_calls"
    assert [e for e in parsed.events if isinstance(e, Usage)] == [WANT_USAGE]


def test_converse_body_to_message_and_claude_body_as_is() -> None:
    msg = BedrockMessages(PROVIDER).parse_body(orjson.dumps(CONVERSE_BODY)).obj
    assert [b["type"] for b in msg["content"]] == ["thinking", "text", "tool_use"]
    assert msg["usage"]["cache_read_input_tokens"] == 100 and msg["stop_reason"] == "tool_use"
    claude = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [
        {"type": "text", "text": "Hi"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}}
    assert BedrockMessages(PROVIDER).parse_body(orjson.dumps(claude)).obj == claude


@pytest.mark.parametrize(("model", "counted"), [
    ("anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    (CLAUDE, "anthropic.claude-sonnet-4-5-20250929-v1:0"),  # an inference profile: counted with its model
    ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "anthropic.claude-haiku-4-5-20251001-v1:0"),
    ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x-v1:0", None),
    (NOVA, None),
])
def test_count_tokens_goes_to_count_tokens_for_claude(model: str, counted: str | None) -> None:
    body = {"model": "claude", "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled", "budget_tokens": 2048}}
    req = BedrockMessages(PROVIDER).count_tokens_request(body, model, {"anthropic-beta": "x-2025"})
    if counted is None:
        assert req is None
        return
    assert req is not None and req.url.endswith(f"/model/{counted.replace(':', '%3A')}/count-tokens")
    sent = orjson.loads(base64.b64decode(orjson.loads(req.body)["input"]["invokeModel"]["body"]))
    assert sent == {"messages": body["messages"], "thinking": body["thinking"], "max_tokens": 2049,
                    "anthropic_version": "bedrock-2023-05-31", "anthropic_beta": ["x-2025"]}


def test_count_tokens_answer_in_anthropic_shape() -> None:
    tr = BedrockMessages(PROVIDER)
    assert orjson.loads(tr.count_tokens_answer(b'{"inputTokens": 42}')) == {"input_tokens": 42}
    assert tr.count_tokens_answer(b"not json") == b"not json"


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["contentBlockIndex", "delta", "start", "text", "toolUse", "input",
                                         "reasoningContent", "signature", "stopReason", "usage", "inputTokens",
                                         "toolUseId", "name", "role"]), inner, max_size=4), max_leaves=12)
NAMES = st.sampled_from(["messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop",
                         "messageStop", "metadata", "chunk", "error", "other"])


@given(st.lists(st.tuples(NAMES, JSON), max_size=8))
@settings(max_examples=300, deadline=None)
def test_fuzz_converse_events_never_crash_a_parser(events: list[tuple[str, Any]]) -> None:
    """Any JSON under any event name: typed events (an InbandError for what is unreadable), never an
    exception, in both cells' parsers."""
    chat, messages = BedrockChat(PROVIDER).stream_parser(), BedrockMessages(PROVIDER).stream_parser()
    for name, obj in events:
        sse = SSEEvent(orjson.dumps(obj), name)
        chat.parse(sse)
        messages.parse(sse)
    messages.finish()
