"""What a stream's usage counts once it has ended (`core.usage_estimate`), read from the assemblers fed by
the translators' own output: a Messages answer translated from a chat upstream must open with
`message_start` counts and end with `message_delta` counts before any are known; those zeros are no
count, so the key is charged an estimate (docs/extensions.md, "A stream without usage"); the counts a stream
cut before its end had reported are a floor the estimate raises (`charged`)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.events import Usage
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.usage_estimate import charged, reported
from gateway.providers.messages_openai import OpenAIMessages
from gateway.providers.settings import ProviderConfig
from tests.chat_scripts import chunk, usage_chunk
from tests.unit.reads import pump_reads, the_end

TR = OpenAIMessages(ProviderConfig("oai", "openai", "http://up/v1", "sk-x"))


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
