"""`POST /v1/chat/completions`: the Chat Completions API, streamed or not, as a value the one pipeline
serves (`pipeline.serve`): where its prompt's texts are, its stream core and output filter, its error
event, how a whole answer's texts are masked and read, and a cached answer as a stream.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import orjson

from gateway.apis.catalog import CHAT
from gateway.core.chat.assemble import ChatAssembler, completion_to_chunks
from gateway.core.chat.filter import ChatOutputFilter, empty_logprobs
from gateway.core.chat.stream import ChatStream
from gateway.core.chat.wire import REASONING_DETAILS, TEXT_FIELDS, chunk_events, detail_texts
from gateway.core.events import DeltaKind, StreamEvent, Usage
from gateway.core.sse import DONE_EVENT, encode_data
from gateway.errors import GatewayError, InvalidRequest
from gateway.http import Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.api import ServedApi
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.safety import TextMap
from gateway.pipeline.serve import serve
from gateway.pipeline.slicer import TextSlot


def input_slots(body: dict[str, Any], texts: bool = True) -> list[TextSlot]:
    """Where the prompt's text lives: each message's content string and each content part's text. The
    shape is checked either way; with `texts` False (nothing reads the prompt's texts) none is gathered."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages must be an array", param="messages")
    slots: list[TextSlot] = []
    for m in messages:
        if not isinstance(m, dict):
            raise InvalidRequest("each message must be an object", param="messages")
        if not texts:
            continue
        content = m.get("content")
        if isinstance(content, str):
            slots.append((m, "content"))
        elif isinstance(content, list):
            slots.extend((p, "text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return slots


def hit_stream(body: dict[str, Any], ctx: RequestContext) -> bytes:
    """A cached completion as a stream: one content delta (plus usage if the client asked), `[DONE]`."""
    chunks = [c for c in completion_to_chunks(body) if c["choices"] or ctx.forward_usage]
    return b"".join(encode_data(orjson.dumps(c)) for c in chunks) + DONE_EVENT


def map_texts(obj: dict[str, Any], fn: TextMap) -> None:
    for choice in obj.get("choices") or ():
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            continue
        changed = False
        for field, kind in TEXT_FIELDS:
            text = msg.get(field)
            if isinstance(text, str) and text:
                msg[field] = fn(kind, text)
                changed |= msg[field] != text
        for _at, entry, field in detail_texts(msg.get(REASONING_DETAILS)):  # the reasoning once more
            text = entry[field]
            entry[field] = fn(DeltaKind.REASONING, text)
            changed |= entry[field] != text
        if changed:
            empty_logprobs(choice)  # its tokens would spell out the text before masking


def read_answer(obj: dict[str, Any], events: list[StreamEvent]) -> ChatAssembler:
    """The masked body's text (what the client reads, so guardrails judge that), with the usage the
    provider's own parser found. The body is OpenAI-shaped whatever the provider, so it is read as such."""
    usage: list[StreamEvent] = [e for e in events if type(e) is Usage]
    text: list[StreamEvent] = [e for e in chunk_events(obj, message_key="message") if type(e) is not Usage]
    assembler = ChatAssembler()
    assembler.feed(text + usage[-1:])
    return assembler


def streamed_answer(stream: ChatStream) -> dict[str, Any]:
    return stream.completion()


SERVED = ServedApi(
    CHAT, input_slots, ChatStream, ChatOutputFilter, GatewayError.sse_bytes, map_texts, read_answer,
    streamed_answer, hit_stream,
)


def chat_completions(request: GatewayRequest) -> Awaitable[Response | StreamResponse]:
    return serve(request, SERVED)  # the serve path's own coroutine: no frame of ours between it and the server
