"""The helpers the translators share (`providers/convert/chat_chunks`, `data_url`, `tool_arguments`,
`providers/retry_after`): one behaviour for every cell that uses them."""

from __future__ import annotations

import orjson

from gateway.core.events import DeltaKind, Failure, FailureKind, Usage
from gateway.core.sse import SSEEvent
from gateway.providers.convert.anthropic_errors import classify_anthropic_http_error
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser, parse_anthropic_body
from gateway.providers.convert.bedrock_endpoint import classify_bedrock_http_error
from gateway.providers.convert.chat_chunks import ChatChunks
from gateway.providers.convert.data_url import base64_data, data_url
from gateway.providers.convert.google_errors import classify_google_http_error
from gateway.providers.convert.google_stream import parse_google_body
from gateway.providers.convert.openai_chat import classify_openai_http_error
from gateway.providers.convert.tool_arguments import arguments_object
from gateway.providers.retry_after import with_retry_after


def test_translated_usage_is_usage_as_openai_with_cache_writes_shown() -> None:
    """One usage conversion (`Usage.as_openai`): a translated answer shows its cache writes, 0 included
    (its provider reports them), in bodies and streams alike."""
    anthropic = {"id": "m", "type": "message", "model": "c", "content": [{"type": "text", "text": "hi"}],
                 "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 2}}
    usage = parse_anthropic_body(orjson.dumps(anthropic), 1).obj["usage"]
    assert usage == Usage(input=3, output=2).as_openai(writes_reported=True)
    assert usage["prompt_tokens_details"]["cache_write_tokens"] == 0
    assert "cache_write_tokens" not in Usage(input=3, output=2).as_openai()["prompt_tokens_details"]
    google = {"candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
              "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}
    assert parse_google_body(orjson.dumps(google), 1).obj["usage"] == Usage(input=3, output=2).as_openai(True)
    written = {**anthropic, "usage": {"input_tokens": 3, "output_tokens": 2, "cache_creation_input_tokens": 5}}
    details = parse_anthropic_body(orjson.dumps(written), 1).obj["usage"]["prompt_tokens_details"]
    assert details["cache_write_tokens"] == 5


def test_the_stream_usage_chunk_is_the_same_object() -> None:
    parser = AnthropicStreamParser(1)
    parser.parse(SSEEvent(b'{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":3}}}'))
    chunks = parser.parse(SSEEvent(b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},'
                                   b'"usage":{"output_tokens":2}}'))
    assert chunks[-1].obj == {"id": "m", "object": "chat.completion.chunk", "created": 1, "model": "c",
                              "choices": [], "usage": Usage(input=3, output=2).as_openai(True)}


def test_the_chunks_envelope_a_role_chunk_once() -> None:
    out = ChatChunks(7)
    assert len(out.start()) == 1 and out.start() == []
    refusal = out.text(DeltaKind.REFUSAL, "no")
    assert refusal.obj is not None and refusal.obj["choices"][0]["delta"] == {"refusal": "no"}
    fragment = out.tool_call(0, None, None, '{"a"')
    assert fragment.obj is not None and fragment.obj["choices"][0]["delta"] == {
        "tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}


def test_data_urls_read_only_base64_and_round_trip() -> None:
    inline = base64_data("data:image/png;name=a.png;base64,QUJD")
    assert inline is not None and (inline.media_type, inline.data) == ("image/png", "QUJD")
    assert base64_data("data:text/plain,hello") is None and base64_data("https://x/a.png") is None
    assert base64_data(data_url("application/pdf", "QUJD")) == base64_data("data:application/pdf;base64,QUJD")


def test_tool_arguments_become_an_object() -> None:
    assert arguments_object('{"a": 1}') == {"a": 1}
    assert arguments_object("") == {} and arguments_object("[1]") == {} and arguments_object("{bad") == {}


def test_every_classifier_takes_the_retry_after_header() -> None:
    headers = {"retry-after": "7"}
    for classify in (classify_openai_http_error, classify_anthropic_http_error, classify_bedrock_http_error,
                     classify_google_http_error):
        assert classify(429, headers, b"").retry_after_s == 7.0, classify.__name__


def test_a_wait_the_error_gave_wins_over_the_header() -> None:
    said = Failure(FailureKind.HTTP_429, "slow down", 429, retry_after_s=2.0)
    assert with_retry_after(said, {"retry-after": "30"}).retry_after_s == 2.0
    assert with_retry_after(Failure(FailureKind.HTTP_429, "x", 429), {"retry-after-ms": "1500"}).retry_after_s == 1.5
    assert with_retry_after(said, {}) is said
