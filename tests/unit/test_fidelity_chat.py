"""Protocol fidelity of the Chat Completions API: for any valid upstream stream, cut into any reads, what
openai-python's own `Stream` and `ChatCompletionStreamState` make of the gateway's bytes equals the one-shot
conversion of the upstream's whole answer (the non-stream body the same server gives, read by the same
translator).

Upstreams: an OpenAI-compatible server (passed through, read by its bytes on the fast path) and Anthropic
(translated by `chat_anthropic_stream`). The streams are `upstream_gen`'s: text, reasoning, refusals,
parallel tool calls with their fragments interleaved, usage on the finish chunk or apart, keep-alive
comments, multi-line data, `id:`/`retry:`/unknown fields, CR/LF/CRLF. The core is driven as the pipeline
drives it (hold until the first token, commit, one feed per read, then the relay's end: the windows'
flush and `[DONE]`)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream, StreamParser
from gateway.core.stages import StageFactory
from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.convert.anthropic_stream import parse_anthropic_body
from gateway.providers.convert.openai_chat import OpenAIStreamParser, parse_openai_body
from gateway.providers.settings import ProviderConfig
from tests.unit.fidelity import drive, fidelity
from tests.unit.model_safety import safety
from tests.unit.sdk_read import ParsedChatCompletionSnapshot, openai_chat
from tests.unit.upstream_gen import chat_answers, chat_events, framed, message_events, messages, reads

ANTHROPIC = AnthropicChat(ProviderConfig("claude", "anthropic", "https://api.anthropic.test", "sk-ant"),
                          clock=lambda: 1.0)


def through_gateway(parser: StreamParser, pieces: list[bytes], factory: StageFactory | None = None) -> list[bytes]:
    """The client's bytes, read by read, as the chat relay writes them (usage asked for by the client)."""
    stream = ChatStream(parser, "up/m")
    filt = ChatOutputFilter(factory, True)
    out = drive(stream, filt, pieces)
    assert stream.error is None and not stream.ended_early
    return [*out, stream.drain(), stream.tail(), stream.finish()]  # the relay's end: the core's bytes


def assert_same(got: ParsedChatCompletionSnapshot, want: dict[str, Any]) -> None:
    """The accumulated stream against the body: text, refusal, reasoning, tool calls, finish, usage."""
    assert len(got.choices) == 1
    g, w = got.choices[0], want["choices"][0]
    msg, wmsg = g.message, w["message"]
    assert (msg.content or "") == (wmsg.get("content") or "")
    assert (msg.refusal or "") == (wmsg.get("refusal") or "")
    extra = msg.model_extra or {}
    for field in ("reasoning_content", "reasoning"):
        assert (extra.get(field) or "") == (wmsg.get(field) or ""), field
    calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    assert calls == [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in wmsg.get("tool_calls") or []]
    assert g.finish_reason == w["finish_reason"]
    usage = got.usage.model_dump(exclude_none=True) if got.usage is not None else None
    assert usage == want.get("usage")


@fidelity(150)
@given(st.data())
def test_an_openai_compatible_stream_reads_as_its_completion(data: st.DataObject) -> None:
    answer = data.draw(chat_answers())
    raw = data.draw(framed(data.draw(chat_events(answer))))
    pieces = data.draw(reads(raw))
    got, _ = openai_chat(through_gateway(OpenAIStreamParser(), pieces))
    assert_same(got, parse_openai_body(orjson.dumps(answer.completion())).obj)


@fidelity(60)
@given(st.data())
def test_through_a_redaction_window_with_nothing_to_mask_the_answer_is_the_same(data: st.DataObject) -> None:
    """The filter's general path (text held in the window, released later, flushed at the finish)."""
    answer = data.draw(chat_answers(max_tools=2))
    raw = data.draw(framed(data.draw(chat_events(answer))))
    run = safety(False).start()
    assert run is not None
    got, _ = openai_chat(through_gateway(OpenAIStreamParser(), data.draw(reads(raw)), run.factory))
    if run.redaction_counts():
        return  # the random text happened to hold something a rule masks: not this property's case
    assert_same(got, parse_openai_body(orjson.dumps(answer.completion())).obj)


@fidelity(120)
@given(st.data())
def test_an_anthropic_stream_reads_as_its_message_translated(data: st.DataObject) -> None:
    msg = data.draw(messages())
    raw = data.draw(framed(data.draw(message_events(msg))))
    pieces = data.draw(reads(raw))
    got, _ = openai_chat(through_gateway(ANTHROPIC.stream_parser(), pieces))
    assert_same(got, parse_anthropic_body(orjson.dumps(msg), 1).obj)
