"""Protocol fidelity of the Messages API: for any valid upstream stream, cut into any reads, what
anthropic-sdk-python's own `Stream` and `MessageStream` accumulator make of the gateway's bytes equals the
one-shot conversion of the upstream's whole answer (the non-stream body, read by the same translator).

Upstreams: Anthropic (native, read by its bytes on the fast path) and an OpenAI-compatible server
(translated by `messages_openai_stream`, whose parallel tool calls may interleave their fragments in any
order). A translated answer is compared block kind by block kind: its text and thinking may be cut into
more blocks than the body's (a Messages stream has one block open at a time), their concatenations and the
tool calls (id, name, input, in order) must be the same. The core is driven as the pipeline drives it (hold
until the first token, commit, one feed per read, then the relay's end: what the parser still owed, the
the core's `drain`, `tail` and `finish`)."""

from __future__ import annotations

from typing import Any

import orjson
from anthropic.types import Message
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream, MessagesStreamParser
from gateway.core.stages import StageFactory
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser, parse_messages_body
from gateway.providers.messages_openai import OpenAIMessages
from gateway.providers.settings import ProviderConfig
from tests.unit.fidelity import drive, fidelity
from tests.unit.model_safety import safety
from tests.unit.sdk_read import anthropic_message
from tests.unit.upstream_gen import chat_answers, chat_events, framed, message_events, messages, reads

OPENAI = OpenAIMessages(ProviderConfig("oai", "openai", "http://up/v1", "sk-x"))


def through_gateway(parser: MessagesStreamParser, pieces: list[bytes],
                    factory: StageFactory | None = None) -> list[bytes]:
    """The client's bytes, read by read, as the Messages relay writes them."""
    stream = MessagesStream(parser, "up/m")
    filt = MessagesOutputFilter(factory)
    out = drive(stream, filt, pieces)
    assert stream.failed is None and stream.terminal, "the answer ended whole"
    return [*out, stream.drain(), stream.tail(), stream.finish()]  # the relay's end: the core's bytes


def by_kind(content: list[dict[str, Any]]) -> tuple[str, str, list[tuple[str, str, Any]]]:
    """(all thinking, all text, the tool calls): the content blocks without their boundaries."""
    thinking = "".join(b["thinking"] for b in content if b["type"] == "thinking")
    text = "".join(b["text"] for b in content if b["type"] == "text")
    return thinking, text, [(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]


def _dump(got: Message) -> dict[str, Any]:
    return got.model_dump(mode="json", exclude_none=True)


@fidelity(150)
@given(st.data())
def test_an_anthropic_stream_reads_as_its_message(data: st.DataObject) -> None:
    msg = data.draw(messages())
    raw = data.draw(framed(data.draw(message_events(msg))))
    got = _dump(anthropic_message(through_gateway(AnthropicMessagesStreamParser(), data.draw(reads(raw)))))
    want = parse_messages_body(orjson.dumps(msg)).obj
    assert got["content"] == want["content"]  # block for block: nothing is translated
    assert (got["id"], got["model"], got["stop_reason"]) == (want["id"], want["model"], want["stop_reason"])
    assert got["usage"] == want["usage"]


@fidelity(200)
@given(st.data())
def test_an_openai_compatible_stream_reads_as_its_completion_translated(data: st.DataObject) -> None:
    """Parallel tool calls whose argument fragments interleave (0, 1, 0, 1, ...) each keep all their input."""
    answer = data.draw(chat_answers())
    raw = data.draw(framed(data.draw(chat_events(answer))))
    got = _dump(anthropic_message(through_gateway(OPENAI.stream_parser(), data.draw(reads(raw)))))
    want = OPENAI.parse_body(orjson.dumps(answer.completion())).obj
    assert by_kind(got["content"]) == by_kind(want["content"])
    assert (got["id"], got["model"], got["stop_reason"]) == (want["id"], want["model"], want["stop_reason"])
    assert got["usage"] == want["usage"]


@fidelity(60)
@given(st.data())
def test_translated_through_a_redaction_window_with_nothing_to_mask_the_answer_is_the_same(
        data: st.DataObject) -> None:
    """The filter's windows hold text and release it later, the held calls and text come at the finish."""
    answer = data.draw(chat_answers(max_tools=2))
    raw = data.draw(framed(data.draw(chat_events(answer))))
    run = safety(False).start()
    assert run is not None
    out = through_gateway(OPENAI.stream_parser(), data.draw(reads(raw)), run.factory)
    got = _dump(anthropic_message(out))
    if run.redaction_counts():
        return  # the random text happened to hold something a rule masks: not this property's case
    want = OPENAI.parse_body(orjson.dumps(answer.completion())).obj
    assert by_kind(got["content"]) == by_kind(want["content"])
    assert got["stop_reason"] == want["stop_reason"]
