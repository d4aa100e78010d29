"""`POST /v1/responses`: the OpenAI Responses API, streamed or not, as a value the one pipeline serves
(`pipeline.serve`). Only requests that are self-contained (no `previous_response_id`, `store: false`)
are cached: any other one's answer depends on, or creates, state the upstream keeps.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from gateway.apis.catalog import RESPONSES
from gateway.core.continuation import prefill_input
from gateway.core.events import StreamEvent, last_usage
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.items import output_ids, references, response_output_ids
from gateway.core.responses.stream import ResponsesStream
from gateway.core.responses.wire import map_response_texts
from gateway.core.stages import StageFactory
from gateway.errors import ConversationNotFound, GatewayError, InvalidRequest
from gateway.http import Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.api import Owned, ServedApi, replayed
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.safety import TextMap
from gateway.pipeline.serve import serve
from gateway.pipeline.slicer import TextSlot


def self_contained(body: dict[str, Any]) -> bool:
    """A request whose answer depends on its body alone: no `previous_response_id` and `store: false`."""
    return body.get("store") is False and body.get("previous_response_id") is None


_ITEM_TEXTS = ("content", "output")  # an input item's texts: a message's, a tool result's


def input_slots(body: dict[str, Any], texts: bool = True) -> list[TextSlot]:
    """Where the prompt's text lives: (object, key) of `instructions`, of `input` as a string, and of
    each input item's `content` and `output` (a tool's result: `function_call_output`,
    `custom_tool_call_output`, ...), as a string or as parts with `text`, as a chat `tool` message's and a
    Messages `tool_result`'s are read. The shape is checked either way; with `texts` False (nothing reads
    the prompt's texts) none is gathered."""
    slots: list[TextSlot] = []
    if texts and isinstance(body.get("instructions"), str):
        slots.append((body, "instructions"))
    value = body.get("input")
    if isinstance(value, str):
        if texts:
            slots.append((body, "input"))
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, dict):
                raise InvalidRequest("each input item must be an object", param="input")
            if not texts:
                continue
            for key in _ITEM_TEXTS:
                content = item.get(key)
                if isinstance(content, str):
                    slots.append((item, key))
                elif isinstance(content, list):
                    slots.extend((p, "text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    elif value is not None:
        raise InvalidRequest("input must be a string or an array", param="input")
    return slots


def hit_stream(obj: dict[str, Any], ctx: RequestContext) -> bytes:
    """A cached `response` object as the stream it would have been, terminal event included."""
    return replayed(SERVED, obj)


def error_event(err: GatewayError) -> bytes:
    return ResponsesOutputFilter(None).error_event(err.body()["error"])


def output_filter(factory: StageFactory | None, _forward_usage: bool) -> ResponsesOutputFilter:
    return ResponsesOutputFilter(factory)


def map_texts(obj: dict[str, Any], fn: TextMap) -> None:
    map_response_texts(obj, lambda _key, kind, text: fn(kind, text))


def read_answer(obj: dict[str, Any], events: list[StreamEvent]) -> ResponsesAssembler:
    """The masked body's text, with the usage the provider's own parser found (a translated `response`
    object has no field for cache writes: `convert.responses_chat_stream.counted`)."""
    assembler = ResponsesAssembler()
    assembler.feed_response(obj)
    usage = last_usage(events)
    if usage is not None:
        assembler.usage = usage
    return assembler


def streamed_answer(stream: ResponsesStream) -> dict[str, Any]:
    """The terminal event's `response`: the filter wrote the released (masked) texts into it."""
    end = stream.terminal
    resp = end.obj.get("response") if end is not None and end.obj is not None else None
    return resp if isinstance(resp, dict) else {}


def completed(obj: dict[str, Any]) -> bool:
    return obj.get("status") == "completed"


def continued(body: dict[str, Any]) -> str | None:
    """The id a request continues (`previous_response_id`), bound to its creator (pipeline.ownership).
    A `conversation` (an id, or an object with one) is refused: the gateway creates none, so none is the
    caller's (errors.ConversationNotFound)."""
    conversation = body.get("conversation")
    if conversation is not None:
        cid = conversation.get("id") if isinstance(conversation, dict) else conversation
        if not isinstance(cid, str):
            raise InvalidRequest("conversation must be a string or an object with a string id", param="conversation")
        raise ConversationNotFound.named(cid)
    rid = body.get("previous_response_id")
    if rid is None or isinstance(rid, str):
        return rid
    raise InvalidRequest("previous_response_id must be a string", param="previous_response_id")


def stored(body: dict[str, Any]) -> bool:
    return body.get("store") is not False  # OpenAI keeps responses unless told not to


def body_id(obj: dict[str, Any]) -> str | None:
    rid = obj.get("id")
    return rid if isinstance(rid, str) else None


def stream_id(stream: ResponsesStream) -> str | None:
    """The id `response.created` named (held in the preamble until the first token)."""
    rid = stream.assembler.meta.get("id")
    return rid if isinstance(rid, str) else None


def referenced(body: dict[str, Any]) -> list[str]:
    """The ids of the stored items the input names (`item_reference`, `core.responses.items`), bound to
    the tenant that was given them (pipeline.ownership)."""
    ids = references(body)
    for rid in ids:
        if not isinstance(rid, str):
            raise InvalidRequest("an item_reference must name an item by a string id", param="input")
    return ids


def body_items(obj: dict[str, Any]) -> list[str]:
    return response_output_ids(obj)


def stream_items(stream: ResponsesStream) -> list[str]:
    """The items the stream announced, and those of its terminal event's `response`, if it came."""
    end = stream.terminal
    resp = end.obj.get("response") if end is not None and end.obj is not None else None
    return output_ids(stream.assembler.items.values(), resp.get("output") if isinstance(resp, dict) else None)


OWNED = Owned(continued, stored, body_id, stream_id, referenced, body_items, stream_items)


SERVED = ServedApi(
    RESPONSES, input_slots, ResponsesStream, output_filter, error_event, map_texts, read_answer, streamed_answer,
    hit_stream, cacheable=self_contained, answer_cacheable=completed, streamed_answer_masked=True,
    prefill=prefill_input, owned=OWNED,
)


def responses(request: GatewayRequest) -> Awaitable[Response | StreamResponse]:
    return serve(request, SERVED)  # the serve path's own coroutine: no frame of ours between it and the server
