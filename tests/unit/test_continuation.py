"""Mid-stream continuation, sans I/O (CONTRACT §4.9, issue #32): the request that continues an answer, the
seam where the continuing attempt's text joins the client's, and every API's core carrying another
attempt's events as its own — read by the official SDKs as one answer, a secret split by the failure
masked whole wherever the split falls.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.core.continuation import Diverged, Mode, Seam, add_usage, prefill_input, prefill_messages, prefill_text
from gateway.core.events import DeltaKind, Finish, OutputDelta, StreamEvent, StreamFailed, ToolCallDelta, Usage
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.stream import StreamCore
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from gateway.providers.convert.responses_pass_through import OpenAIResponsesStreamParser
from tests import anthropic_scripts as a
from tests.unit import sdk_read
from tests.unit.model_safety import safety
from tests.unit.test_responses_stream import message_events

SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
CONTENT = DeltaKind.CONTENT

# -- the seam --------------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 40), max_size=6))
def test_a_regenerated_answer_is_released_past_the_text_already_sent_however_it_is_split(cuts: list[int]) -> None:
    sent, whole = "One, two, ", "One, two, three, four."
    bounds = sorted({0, len(whole), *(min(c, len(whole)) for c in cuts)})
    seam = Seam(Mode.REGENERATE, sent)
    released = "".join(seam.feed(whole[i:j]) for i, j in itertools.pairwise(bounds))
    seam.end()
    assert released == "three, four."


def test_a_regenerated_answer_that_differs_or_stops_short_diverges() -> None:
    seam = Seam(Mode.REGENERATE, "One, two, ")
    assert seam.feed("One, ") == ""
    with pytest.raises(Diverged):
        seam.feed("three")
    short = Seam(Mode.REGENERATE, "One, two, ")
    short.feed("One,")
    with pytest.raises(Diverged):
        short.end()
    with pytest.raises(Diverged):
        Seam(Mode.REGENERATE, "One").other_output()  # a tool call before the join: another answer


@pytest.mark.parametrize(("sent", "writes", "client_reads"), [
    ("One, two, ", [" three"], "three"),  # the left-out space, written again: dropped once
    ("One, two, ", ["three"], "three"),  # not written again: nothing to drop
    ("One, two,\n\n", ["\n", "\nthree"], "three"),
    ("One, two,\n\n", [" three"], " three"),  # other whitespace is the model's own
    ("One, two", [" three"], " three"),  # nothing was left out
])
def test_a_prefill_continuation_writes_the_left_out_whitespace_once(sent: str, writes: list[str],
                                                                     client_reads: str) -> None:
    seam = Seam(Mode.PREFILL, sent)
    assert "".join(seam.feed(w) for w in writes) == client_reads
    seam.end()  # a prefill never diverges


def test_the_prefill_request_of_each_api() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    assert prefill_messages(chat, "Hel") == {**chat, "messages": [*chat["messages"],
                                                                      {"role": "assistant", "content": "Hel"}]}
    own = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "{"}]}
    assert prefill_messages(own, '"a": 1')["messages"][-1] == {"role": "assistant", "content": '{"a": 1'}
    blocks = {"messages": [{"role": "assistant", "content": [{"type": "text", "text": "{"}]}]}
    assert prefill_messages(blocks, "x")["messages"][-1]["content"][-1] == {"type": "text", "text": "x"}
    resp = prefill_input({"input": "hi"}, "Hel")["input"]
    assert resp == [{"role": "user", "content": "hi"},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hel"}]}]
    assert chat["messages"] == [{"role": "user", "content": "hi"}], "the client's request is not changed"
    assert prefill_text("Hel \n") == "Hel" and prefill_text("  ") == ""


def test_usage_of_two_attempts_is_summed_field_by_field() -> None:
    assert add_usage(Usage(1, 2, 3, 4, 5), Usage(10, 20, 30, 40, 50)) == Usage(11, 22, 33, 44, 55)
    assert add_usage(None, Usage(1)) == Usage(1) and add_usage(Usage(2), None) == Usage(2)
    assert add_usage(None, None) is None


# -- each core, continued --------------------------------------------------------------------------

def _sse(objs: list[dict[str, Any]]) -> bytes:
    return b"".join(b"event: " + o["type"].encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n" for o in objs)


def _chat_chunk(text: str) -> bytes:
    return b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                     "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
                                    ) + b"\n\n"


def chat(factory: Any, pieces: list[str]) -> tuple[StreamCore, list[bytes]]:
    stream = ChatStream(OpenAIStreamParser(), "up/m")
    stream.feed(_chat_chunk(pieces[0]))
    out = [stream.commit(ChatOutputFilter(factory, True))]
    out += [stream.feed(_chat_chunk(p)) for p in pieces[1:]]
    return stream, out


def messages(factory: Any, pieces: list[str]) -> tuple[StreamCore, list[bytes]]:
    stream = MessagesStream(AnthropicMessagesStreamParser(), "up/m")
    stream.feed(_sse([a.message_start(), *a.text_block(0, pieces[:1])[:2]]))
    out = [stream.commit(MessagesOutputFilter(factory))]
    out += [stream.feed(_sse([a.text_block(0, [p])[1]])) for p in pieces[1:]]
    return stream, out


def responses(factory: Any, pieces: list[str]) -> tuple[StreamCore, list[bytes]]:
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "up/m")
    events = message_events(pieces)[:4 + len(pieces)]  # the lifecycle, the item, its part, the deltas
    stream.feed(_sse(events[:5]))
    out = [stream.commit(ResponsesOutputFilter(factory))]
    out += [stream.feed(_sse([ev])) for ev in events[5:]]
    return stream, out


def read_chat(out: list[bytes]) -> tuple[str, Any]:
    snapshot, chunks = sdk_read.openai_chat(out)
    assert {c.id for c in chunks} == {"c"}
    return snapshot.choices[0].message.content or "", chunks[-1].usage


def read_messages(out: list[bytes]) -> tuple[str, Any]:
    msg = sdk_read.anthropic_message(out)
    assert len(msg.content) == 1 and msg.stop_reason == "end_turn"
    return msg.content[0].text, msg.usage  # type: ignore[union-attr]


def read_responses(out: list[bytes]) -> tuple[str, Any]:
    read, events = sdk_read.openai_response(out)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1]
    assert final.type == "response.completed"
    delta_text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.response.output_text == delta_text == read.snapshot.output[0].content[0].text
    return delta_text, final.response.usage


CORES: dict[str, tuple[Callable[[Any, list[str]], tuple[StreamCore, list[bytes]]],
                       Callable[[list[bytes]], tuple[str, Any]]]] = {
    "chat": (chat, read_chat), "messages": (messages, read_messages), "responses": (responses, read_responses)}


def continued(api: str, factory: Any, first: list[str], rest: list[StreamEvent]) -> tuple[str, Any]:
    """The first attempt's pieces, its upstream gone; then the rest as another attempt's events, and the
    stream's own end: what the client's SDK reads."""
    start, read = CORES[api]
    stream, out = start(factory, first)
    stream.end_of_input()
    assert stream.resume_point() == "".join(first)
    out.append(stream.continue_with(rest))
    out.append(stream.continue_with([Finish(0, stream.end_reason() or ""), Usage(7, 5)]))
    out += [stream.tail(), stream.finish()]
    return read(out)


@pytest.mark.parametrize("api", CORES)
def test_a_continued_stream_is_one_answer_with_the_summed_usage(api: str) -> None:
    text, usage = continued(api, None, ["One, ", "two, "], [OutputDelta(0, CONTENT, "three.")])
    assert text == "One, two, three."
    tokens = (usage.prompt_tokens, usage.completion_tokens) if api == "chat" else (
        (usage.input_tokens, usage.output_tokens))
    assert tokens == (7, 5)


def test_a_continued_messages_stream_keeps_the_reasoning_count() -> None:
    """The summed usage's reasoning part is the Messages stream's too (Anthropic's usage has no field for
    it: `output_tokens_details.thinking_tokens`, where the assembler reads it)."""
    stream, _ = messages(None, ["One, "])
    stream.end_of_input()
    stream.continue_with([OutputDelta(0, CONTENT, "two.")])
    stream.continue_with([Finish(0, stream.end_reason() or ""), Usage(7, 5, reasoning=3)])
    assert stream.assembler.usage == Usage(7, 5, reasoning=3)


@pytest.mark.parametrize("api", CORES)
@settings(max_examples=12, deadline=None)
@given(k=st.integers(0, len(SECRET)))
def test_a_secret_split_by_the_failure_is_masked_whole(api: str, k: int) -> None:
    run = safety(False).start()
    assert run is not None
    first = ["The key is ", SECRET[:k]] if k else ["The key is "]
    text, _ = continued(api, run.factory, first, [OutputDelta(0, CONTENT, SECRET[k:] + " for now.")])
    assert text == "The key is [REDACTED:github_token] for now."


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_tool_call_cannot_continue_a_messages_or_responses_stream(api: str) -> None:
    stream, _ = CORES[api][0](None, ["One"])
    stream.end_of_input()
    with pytest.raises(StreamFailed):
        stream.continue_with([ToolCallDelta(0, 0, "call_1", "f", "{}")])


def test_no_resume_point_inside_a_tool_call_or_reasoning() -> None:
    stream = ChatStream(OpenAIStreamParser(), "up/m")
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":'}}
    stream.feed(b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                          "choices": [{"index": 0, "delta": {"tool_calls": [call]},
                                                       "finish_reason": None}]}) + b"\n\n")
    stream.commit(ChatOutputFilter(None, False))
    assert stream.resume_point() is None
    thinking = MessagesStream(AnthropicMessagesStreamParser(), "up/m")
    thinking.feed(_sse([a.message_start(), *a.thinking_block(0, ["hmm"])[:2]]))
    thinking.commit(MessagesOutputFilter(None))
    assert thinking.resume_point() is None


@pytest.mark.parametrize("api", CORES)
def test_a_stream_guardrail_judges_across_the_seam(api: str) -> None:
    run = safety(True).start()
    assert run is not None
    stream, out = CORES[api][0](run.factory, ["About project night"])
    stream.end_of_input()
    out.append(stream.continue_with([OutputDelta(0, CONTENT, "ingale: no.")]))
    filt: Any = getattr(stream, "filt")  # noqa: B009 - the core's filter, as the relay reads its refusal
    assert filt.refusal is not None and filt.refusal.guardrail == "g"
    assert b"nightingale" not in b"".join(out)
