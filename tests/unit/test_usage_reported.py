"""What a stream's usage counts once it has ended (`core.usage_estimate`), read from the assemblers fed by
the translators' own output: a Messages answer translated from a chat upstream must open with
`message_start` counts and end with `message_delta` counts before any are known; those zeros are no
count, so the key is charged an estimate (docs/extensions.md, "A stream without usage")."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.events import Usage
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.usage_estimate import reported
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
