"""The cloud cells' answers, any JSON in their shapes, through every client API's stream core as the relay
drives it, and as bodies: Google's GenerateContentResponses (the `gemini` and `vertex` cells) in SSE, and
Bedrock's Converse and InvokeModel events in event-stream frames, cut at any byte. Whatever the upstream
sends (counts up to 2**64 - 1, the largest a JSON integer parses to, negative ones, wrong types), the
gateway writes its client's bytes or fails the attempt (`StreamFailed`): never another exception
(docs/extensions.md, "Costs a client or an upstream can impose")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.core.events import StreamFailed
from gateway.core.eventstream import BedrockStreamTranscoder
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.providers.chat_bedrock import BedrockChat
from gateway.providers.chat_gemini import GeminiChat
from gateway.providers.messages_bedrock import BedrockMessages
from gateway.providers.messages_gemini import GeminiMessages
from gateway.providers.messages_vertex import VertexMessages
from gateway.providers.responses_bedrock import BedrockResponses
from gateway.providers.responses_gemini import GeminiResponses
from gateway.providers.settings import ProviderConfig
from tests.eventstream_frames import chunk, event, exception
from tests.unit.fidelity import fidelity
from tests.unit.reads import pump_reads, the_end
from tests.unit.test_bedrock_translators import PROVIDER as BEDROCK

GEMINI = ProviderConfig("gem", "gemini", "http://up", "k")
VERTEX = ProviderConfig("vx", "vertex", "http://up", project="p", location="global")

# counts at the edges: JSON integers parse up to 2**64 - 1, and a sum of two of those passes 64 bits
COUNTS = st.sampled_from([0, 1, 2**53, 2**63 - 1, 2**64 - 1, -1]) | st.integers(-(2**64), 2**64 - 1)
ANY = st.recursive(st.none() | st.booleans() | COUNTS | st.text(max_size=6),
                   lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                   max_leaves=8)


def _obj(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """An object with any of `fields`, each its own shape or anything at all; or anything at all."""
    return st.fixed_dictionaries({}, optional={k: v | ANY for k, v in fields.items()}) | ANY


def _counts(*keys: str) -> st.SearchStrategy[Any]:
    return st.dictionaries(st.sampled_from(keys), COUNTS | ANY, max_size=len(keys))


_GOOGLE_PART = _obj({"text": st.text(max_size=6), "thought": st.booleans(),
                     "functionCall": _obj({"name": st.text(max_size=4), "args": ANY, "id": st.text(max_size=4)})})
_FINISH = st.sampled_from(["STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "PROHIBITED_CONTENT",
                           "MALFORMED_FUNCTION_CALL", "OTHER", "NEW_REASON", ""])
GOOGLE_RESPONSE = _obj({
    "candidates": st.lists(_obj({"content": _obj({"parts": st.lists(_GOOGLE_PART, max_size=3)}),
                                 "finishReason": _FINISH}), max_size=2),
    "usageMetadata": _counts("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
                             "cachedContentTokenCount", "toolUsePromptTokenCount"),
    "promptFeedback": _obj({"blockReason": _FINISH}),
    "error": _obj({"status": st.sampled_from(["RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "FAILED_PRECONDITION",
                                              "UNAVAILABLE"]), "code": COUNTS, "message": st.text(max_size=6),
                   "details": st.lists(_obj({"@type": st.just("type.googleapis.com/google.rpc.RetryInfo"),
                                             "retryDelay": st.sampled_from(["1s", "0.5s", "x"])}), max_size=2)}),
    "responseId": st.text(max_size=4), "modelVersion": st.text(max_size=4)})

_INDEX = st.integers(0, 3) | ANY
_CONVERSE_USAGE = _counts("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
CONVERSE_EVENTS: dict[str, st.SearchStrategy[Any]] = {
    "messageStart": _obj({"role": st.just("assistant")}),
    "contentBlockStart": _obj({"contentBlockIndex": _INDEX,
                               "start": _obj({"toolUse": _obj({"toolUseId": st.text(max_size=4),
                                                               "name": st.text(max_size=4)})})}),
    "contentBlockDelta": _obj({"contentBlockIndex": _INDEX, "delta": _obj({
        "text": st.text(max_size=6), "toolUse": _obj({"input": st.text(max_size=6)}),
        "reasoningContent": _obj({"text": st.text(max_size=6), "signature": st.text(max_size=4)})})}),
    "contentBlockStop": _obj({"contentBlockIndex": _INDEX}),
    "messageStop": _obj({"stopReason": st.sampled_from(["end_turn", "tool_use", "guardrail_intervened"])}),
    "metadata": _obj({"usage": _CONVERSE_USAGE}),
}
_ANTHROPIC_USAGE = _counts("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
INVOKE_EVENTS = st.one_of(  # InvokeModel's `chunk`s: Claude's own events
    st.fixed_dictionaries({"type": st.just("message_start"),
                           "message": _obj({"id": st.text(max_size=4), "usage": _ANTHROPIC_USAGE})}),
    st.fixed_dictionaries({"type": st.just("content_block_start"), "index": _INDEX,
                           "content_block": _obj({"type": st.sampled_from(["text", "thinking", "tool_use"])})}),
    st.fixed_dictionaries({"type": st.just("content_block_delta"), "index": _INDEX,
                           "delta": _obj({"type": st.sampled_from(["text_delta", "input_json_delta"]),
                                          "text": st.text(max_size=6), "partial_json": st.text(max_size=6)})}),
    st.fixed_dictionaries({"type": st.just("message_delta"), "delta": _obj({"stop_reason": st.just("end_turn")}),
                           "usage": _ANTHROPIC_USAGE}),
    st.fixed_dictionaries({"type": st.sampled_from(["content_block_stop", "message_stop", "ping"])}),
)
BEDROCK_FRAMES = st.one_of(
    *(st.tuples(st.just(name), shape) for name, shape in CONVERSE_EVENTS.items()),
    st.tuples(st.just("chunk"), INVOKE_EVENTS),
    st.tuples(st.just("exception"), st.none()),
)

Core = Callable[[Any], tuple[Any, Any]]
CORES: list[Core] = [
    lambda parser: (ChatStream(parser, "up/m"), ChatOutputFilter(None, True)),
    lambda parser: (MessagesStream(parser, "up/m"), MessagesOutputFilter(None)),
    lambda parser: (ResponsesStream(parser, "up/m"), ResponsesOutputFilter(None)),
]


def relay(core: Core, parser: Any, reads: list[bytes]) -> None:
    """The relay's drive of one stream core; an attempt that fails is one the pipeline retries."""
    stream, filt = core(parser)
    try:
        pump_reads(stream, filt, reads)
        the_end(stream, filt)
    except StreamFailed:
        pass


def _encodable(objs: list[Any]) -> bool:
    try:
        orjson.dumps(objs)
    except TypeError:  # an integer beyond what JSON encodes: no upstream can send it
        return False
    return True


@fidelity(120)
@given(st.lists(GOOGLE_RESPONSE, max_size=5), st.data())
def test_any_google_answer_is_written_or_fails_the_attempt(objs: list[Any], data: st.DataObject) -> None:
    if not _encodable(objs):
        return
    raw = b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs)
    cut = data.draw(st.integers(0, len(raw)))
    parsers = [GeminiChat(GEMINI).stream_parser, GeminiMessages(GEMINI).stream_parser,
               GeminiResponses(GEMINI).stream_parser]
    for core, parser in zip(CORES, parsers, strict=True):
        relay(core, parser(), [raw[:cut], raw[cut:]])
    relay(CORES[1], VertexMessages(VERTEX).stream_parser(), [raw])
    for o in objs:
        for cell in (GeminiChat(GEMINI), GeminiMessages(GEMINI), GeminiResponses(GEMINI)):
            orjson.dumps(cell.parse_body(orjson.dumps(o)).obj)


def _frame(name: str, obj: Any) -> bytes:
    if name == "exception":
        return exception("throttlingException")
    if name == "chunk":  # InvokeModel's: the model's own (Anthropic) event, base64 inside
        return chunk(obj)
    return event(name, obj)


@fidelity(120)
@given(st.lists(BEDROCK_FRAMES, max_size=7), st.data())
def test_any_bedrock_answer_is_written_or_fails_the_attempt(events: list[tuple[str, Any]],
                                                            data: st.DataObject) -> None:
    if not _encodable([o for _, o in events]):
        return
    raw = b"".join(_frame(name, obj) for name, obj in events)
    cut = data.draw(st.integers(0, len(raw)))
    cells = [BedrockChat(BEDROCK), BedrockMessages(BEDROCK), BedrockResponses(BEDROCK)]
    for core, cell in zip(CORES, cells, strict=True):
        coder = BedrockStreamTranscoder()
        try:
            reads = [coder.feed(raw[:cut]), coder.feed(raw[cut:]), coder.end()]
        except StreamFailed:
            continue
        relay(core, cell.stream_parser(), reads)
    for _, obj in events:
        body = orjson.dumps({"output": {"message": {"content": [obj]}}, "usage": obj, "stopReason": "end_turn"})
        for cell in cells:
            orjson.dumps(cell.parse_body(body).obj)
