"""`POST /v1/messages`: the Anthropic Messages API (Claude Code, the Anthropic SDKs), streamed or not, as
a value the one pipeline serves (`pipeline.serve`). The gateway key may come in `x-api-key`; errors are
Anthropic's shape (`{"type":"error","error":{...}}`, in a stream `event: error`). `?beta=true` (Claude
Code's) is accepted and not forwarded: the betas travel in the `anthropic-beta` header, which is. The
deployments that serve it: `anthropic` natively, the OpenAI-compatible ones through a translator.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from gateway.apis.catalog import MESSAGES
from gateway.core.events import StreamEvent
from gateway.core.messages.assemble import MessagesAssembler
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.messages.wire import map_message_texts, message_stream_events, parse_event
from gateway.core.stages import StageFactory
from gateway.errors import GatewayError, InvalidRequest
from gateway.http import Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.api import ServedApi, replayed
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.safety import TextMap
from gateway.pipeline.serve import serve
from gateway.pipeline.slicer import TextSlot

_TEXT_PARTS = frozenset({"text"})


def _blocks(content: Any, slots: list[TextSlot]) -> None:
    """The text blocks of a content array, and of the tool results, documents and search results inside
    it: every text the model reads (input guardrails judge them, `redaction.inputs` masks them). Images,
    PDFs (base64), URLs and file ids carry no text of ours to read."""
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype in _TEXT_PARTS and isinstance(block.get("text"), str):
            slots.append((block, "text"))
        elif btype == "tool_result":
            _text_or_blocks(block, "content", slots)
        elif btype == "document":
            _strings(block, ("title", "context"), slots)
            _document_source(block.get("source"), slots)
        elif btype == "search_result":
            _strings(block, ("title", "source"), slots)
            _blocks(block.get("content"), slots)


def _text_or_blocks(obj: dict[str, Any], key: str, slots: list[TextSlot]) -> None:
    if isinstance(obj.get(key), str):
        slots.append((obj, key))
    else:
        _blocks(obj.get(key), slots)


def _strings(obj: dict[str, Any], keys: tuple[str, ...], slots: list[TextSlot]) -> None:
    slots.extend((obj, k) for k in keys if isinstance(obj.get(k), str))


def _document_source(source: Any, slots: list[TextSlot]) -> None:
    """A plain-text document's `data`, or a custom-content document's `content` (a string or blocks)."""
    if not isinstance(source, dict):
        return
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        slots.append((source, "data"))
    elif source.get("type") == "content":
        _text_or_blocks(source, "content", slots)


def input_slots(body: dict[str, Any], texts: bool = True) -> list[TextSlot]:
    """Where the prompt's text lives: (object, key) of `system` and of each message's text. The shape is
    checked either way; with `texts` False (nothing reads the prompt's texts) none is gathered."""
    slots: list[TextSlot] = []
    system = body.get("system") if texts else None
    if isinstance(system, str):
        slots.append((body, "system"))
    elif system is not None:
        _blocks(system, slots)
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise InvalidRequest("messages: Field required (an array of messages)", param="messages")
    for m in msgs:
        if not isinstance(m, dict):
            raise InvalidRequest("each message must be an object", param="messages")
        if not texts:
            continue
        if isinstance(m.get("content"), str):
            slots.append((m, "content"))
        else:
            _blocks(m.get("content"), slots)
    return slots


def read_answer(msg: dict[str, Any], _events: list[StreamEvent] | None = None) -> MessagesAssembler:
    """A whole Message read as its stream would have been: the same usage, text and end."""
    asm = MessagesAssembler()
    for obj in message_stream_events(msg):
        asm.feed(parse_event(obj, None))
    return asm


def hit_stream(obj: dict[str, Any], ctx: RequestContext) -> bytes:
    """A cached Message as the stream it would have been (docs/extensions.md, "HTTP")."""
    return replayed(SERVED, obj)


def output_filter(factory: StageFactory | None, _forward_usage: bool) -> MessagesOutputFilter:
    return MessagesOutputFilter(factory)


def map_texts(obj: dict[str, Any], fn: TextMap) -> None:
    map_message_texts(obj, lambda _index, kind, text: fn(kind, text))


def streamed_answer(stream: MessagesStream) -> dict[str, Any]:
    return stream.assembler.message()


SERVED = ServedApi(
    MESSAGES, input_slots, MessagesStream, output_filter, GatewayError.anthropic_sse_bytes, map_texts,
    read_answer, streamed_answer, hit_stream,
)


def messages(request: GatewayRequest) -> Awaitable[Response | StreamResponse]:
    return serve(request, SERVED)  # the serve path's own coroutine: no frame of ours between it and the server
