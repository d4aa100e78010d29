"""What an answer's usage counts (`core.usage_estimate`), read from the assemblers fed by the translators'
own output: a Messages answer translated from a chat upstream must open with `message_start` counts and
end with `message_delta` counts before any are known; those zeros are no count, so the key is charged an
estimate (docs/extensions.md, "A stream without usage"); the counts a stream cut before its end had
reported are a floor the estimate raises (`charged`). A Responses answer translated from Anthropic is
counted with its cache writes, which its `usage` object has no field for (docs/caching.md)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.events import MAX_TOKEN_COUNT, Usage
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.sse import SSEDecoder
from gateway.core.usage_estimate import charged, estimated_part, reported
from gateway.providers.messages_openai import OpenAIMessages
from gateway.providers.responses_anthropic import AnthropicResponses
from gateway.providers.settings import ProviderConfig
from tests import anthropic_scripts as a
from tests.chat_scripts import chunk, usage_chunk
from tests.unit.reads import pump_reads, the_end

TR = OpenAIMessages(ProviderConfig("oai", "openai", "http://up/v1", "sk-x"))
CLAUDE = AnthropicResponses(ProviderConfig("claude", "anthropic", "http://up", "sk-ant-x"))
WRITES = {"input_tokens": 20, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 300,
          "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200}, "output_tokens": 1}


def messages_from_chat(objs: list[dict[str, Any]]) -> MessagesStream:
    body = b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs) + b"data: [DONE]\n\n"
    stream = MessagesStream(TR.stream_parser(), "oai/x")
    filt = MessagesOutputFilter(None)
    pump_reads(stream, filt, [body], must_commit=True)
    the_end(stream, filt)
    return stream


def test_a_translation_without_usage_reports_none_and_one_with_usage_its_counts() -> None:
    answer = [chunk({"role": "assistant", "content": ""}), chunk({"content": "hello"}), chunk({}, "stop")]
    without = messages_from_chat(answer)
    assert without.assembler.finished and without.assembler.usage == Usage()  # the placeholder the client reads
    assert reported(without.assembler.usage) is None
    counted = reported(messages_from_chat([*answer, usage_chunk()]).assembler.usage)
    assert counted is not None and (counted.input, counted.cached_input, counted.output) == (11, 3, 7)


def test_reported_keeps_any_count() -> None:
    assert reported(None) is None and reported(Usage()) is None
    assert reported(Usage(input=1)) == Usage(input=1) and reported(Usage(output=2)) == Usage(output=2)


def test_a_partial_usage_is_a_floor_raised_to_the_estimate() -> None:
    start = Usage(input=30, output=1, cached_input=10, cache_creation_input=5, cache_creation_input_1h=5)
    raised = charged(start, Usage(input=12, output=100))
    assert raised == Usage(input=30, output=100, cached_input=10, cache_creation_input=5, cache_creation_input_1h=5)
    assert charged(start, Usage(input=12, output=1)) is start  # nothing more came: the provider's counts
    whole = Usage(input=30, output=500, reasoning=200)
    assert charged(whole, Usage(input=12, output=100)) is whole
    # no input counted (a Converse stream's start): the input estimated, the reported output kept if larger
    assert charged(Usage(output=300, reasoning=40), Usage(input=12, output=100)) == Usage(12, 300, reasoning=40)
    assert charged(None, Usage(input=12, output=100)) == Usage(input=12, output=100)


def test_the_estimated_part_is_what_the_charge_adds_to_the_reported_counts() -> None:
    """`llm_gateway_estimated_tokens_total` counts it: the provider's counts stay in the token metrics."""
    start = Usage(input=30, output=1, cached_input=10)
    assert estimated_part(charged(start, Usage(input=12, output=100)), start) == (0, 99)
    assert estimated_part(charged(Usage(output=300), Usage(input=12, output=100)), Usage(output=300)) == (12, 0)
    assert estimated_part(charged(None, Usage(input=12, output=100)), None) == (12, 100)
    assert estimated_part(start, start) == (0, 0)


def test_a_responses_answer_from_anthropic_is_counted_with_its_cache_writes() -> None:
    want = Usage(input=330, output=12, cached_input=10, cache_creation_input=300, cache_creation_input_1h=200)
    parser, asm = CLAUDE.stream_parser(), ResponsesAssembler()
    for sse in SSEDecoder().feed(b"".join(a.event(e) for e in [
            a.message_start(usage=WRITES), *a.text_block(0, ["hi"]), a.message_delta(), a.message_stop()])):
        for ev in parser.parse(sse):
            asm.feed(ev)
    assert asm.finished and asm.usage == want
    body = CLAUDE.parse_body(orjson.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "c", "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "hi"}], "usage": {**WRITES, "output_tokens": 12}}))
    assert [e for e in body.events if type(e) is Usage] == [want]
    assert body.obj["usage"]["input_tokens_details"] == {"cached_tokens": 10, "cache_write_tokens": 300}


def test_an_upstreams_absurd_counts_are_bounded() -> None:
    """Counts past 64 bits once summed (JSON numbers up to 2**64 - 1 parse as ints) or negative: held to
    0..MAX_TOKEN_COUNT, so the usage chunk made of them still encodes."""
    u = Usage(input=2**64 - 1, output=2**64 - 1, cached_input=-5, cache_creation_input=2**70, reasoning=-1)
    assert u == Usage(MAX_TOKEN_COUNT, MAX_TOKEN_COUNT, 0, MAX_TOKEN_COUNT, 0)
    assert orjson.loads(orjson.dumps(u.as_openai()))["total_tokens"] == 2 * MAX_TOKEN_COUNT
