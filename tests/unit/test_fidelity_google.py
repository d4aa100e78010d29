"""Protocol fidelity of Chat Completions on Google's generateContent (the Gemini API, Vertex AI's Gemini
models): for any answer streamed as GenerateContentResponses in any grouping, framed in any legal way and
cut into any reads, what openai-python's own `Stream` and `ChatCompletionStreamState` make of the
gateway's bytes equals the gateway's conversion of the same answer given whole (the non-stream body);
the same for anthropic-python's `MessageStream` on the Messages API."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.providers.convert.google_stream import GoogleStreamParser, parse_google_body
from gateway.providers.messages_gemini import GeminiMessages
from gateway.providers.messages_vertex import VertexMessages
from gateway.providers.settings import ProviderConfig
from tests import google_scripts as g
from tests.unit.fidelity import fidelity
from tests.unit.sdk_read import anthropic_message, openai_chat
from tests.unit.test_fidelity_chat import assert_same, through_gateway
from tests.unit.test_fidelity_messages import by_kind
from tests.unit.test_fidelity_messages import through_gateway as through_messages
from tests.unit.upstream_gen import ARGS, TEXT, framed, reads

_PART = st.one_of(
    st.builds(g.text, TEXT, st.booleans()),
    st.builds(g.call, st.text("abcxyz_", min_size=1, max_size=4), ARGS, st.none() | st.just("fc-1")),
)
_FINISH = st.sampled_from(["STOP", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "OTHER"])


@st.composite
def answers(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the streamed responses, the whole response) of one answer."""
    parts = draw(st.lists(_PART, max_size=6))
    finish = draw(_FINISH)
    final = g.usage(draw(st.integers(0, 99)), draw(st.integers(0, 99)), draw(st.integers(0, 9)),
                    draw(st.integers(0, 9)))
    cuts = sorted(draw(st.lists(st.integers(0, len(parts)), max_size=4)))
    groups = [parts[a:b] for a, b in pairwise([0, *cuts, len(parts)])]
    streamed = [g.response(group, usage=g.usage(candidates=i) if draw(st.booleans()) else None)
                for i, group in enumerate(groups[:-1])]
    streamed.append(g.response(groups[-1], finish, final))
    return streamed, g.response(parts, finish, final)


@fidelity(150)
@given(st.data())
def test_a_google_stream_reads_as_its_whole_answer(data: st.DataObject) -> None:
    streamed, whole = data.draw(answers())
    raw = data.draw(framed([(None, r) for r in streamed]))
    got, _ = openai_chat(through_gateway(GoogleStreamParser(1), data.draw(reads(raw))))
    assert_same(got, parse_google_body(orjson.dumps(whole), 1).obj)


GEMINI_MESSAGES = GeminiMessages(ProviderConfig("gem", "gemini", "http://up", "k"))
VERTEX_MESSAGES = VertexMessages(ProviderConfig("vx", "vertex", "http://up", project="p", location="global"))


@fidelity(100)
@given(st.data(), st.sampled_from([GEMINI_MESSAGES, VERTEX_MESSAGES]))
def test_a_google_stream_reads_as_its_whole_answer_through_the_messages_api(
        data: st.DataObject, cell: GeminiMessages | VertexMessages) -> None:
    """The same answers to an anthropic SDK client (`/v1/messages` on `gemini`, and on `vertex` whose
    parser picks Google's reader at the first event)."""
    streamed, whole = data.draw(answers())
    raw = data.draw(framed([(None, r) for r in streamed]))
    got = anthropic_message(through_messages(cell.stream_parser(), data.draw(reads(raw))))
    want = cell.parse_body(orjson.dumps(whole)).obj
    dumped = got.model_dump(mode="json", exclude_none=True)
    assert by_kind(dumped["content"]) == by_kind(want["content"])
    assert (dumped["stop_reason"], dumped["usage"]) == (want["stop_reason"], want["usage"])
