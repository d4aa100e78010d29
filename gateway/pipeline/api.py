"""A client API as the one pipeline serves it (issue #29): everything that differs between Chat
Completions, Responses and Messages, as values. One `ServedApi` per API, built in `apis/`; the serve
path (`pipeline.serve`), the attempt opener (`pipeline.opener`), the relay and the body path take it
and know no API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.core.api import ClientApi
from gateway.core.continuation import prefill_messages
from gateway.core.events import StreamEvent
from gateway.core.stages import StageFactory
from gateway.core.stream import Answer, StreamCore
from gateway.errors import GatewayError
from gateway.observe.context import RequestContext
from gateway.pipeline.relay import OutputFilter
from gateway.pipeline.safety import TextMap
from gateway.pipeline.slicer import TextSlot

Body = dict[str, Any]


def always(_body: Body) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Owned:
    """An API whose answers an upstream keeps, named by an id a later request may continue (the
    Responses API's `previous_response_id`), and whose output items a later request may name by their ids
    (`item_reference`): an id works only for its creator's key or team, an item only for its tenant
    (docs/responses-bridge.md, ownership). `continued` and `referenced` raise InvalidRequest on an id of
    the wrong type."""

    continued: Callable[[Body], str | None]  # the id a request continues
    stored: Callable[[Body], bool]  # the request asks the upstream to keep its answer
    body_id: Callable[[Body], str | None]  # a whole answer's id
    stream_id: Callable[[Any], str | None]  # a streamed answer's id (its core), once known
    referenced: Callable[[Body], list[str]]  # the stored items a request names (empty: none)
    body_items: Callable[[Body], list[str]]  # a whole answer's output item ids
    stream_items: Callable[[Any], list[str]]  # a streamed answer's output item ids (its core), at its end


@dataclass(frozen=True, slots=True)
class ServedApi:
    api: ClientApi  # name, route, key headers, error shape, schema (its row of the support matrix)
    # where the prompt's text lives, for input redaction and guardrails (raises InvalidRequest on a
    # body of the wrong shape)
    input_slots: Callable[[Body, bool], list[TextSlot]]  # (body, texts wanted): validates either way
    stream_core: Callable[[Any, str], StreamCore]  # (the translator's parser, the deployment's label)
    output_filter: Callable[[StageFactory | None, bool], OutputFilter]  # (redaction run, forward usage)
    error_event: Callable[[GatewayError], bytes]  # a failure as its in-stream error, after early headers
    map_texts: Callable[[Body, TextMap], None]  # a whole answer's texts rewritten in place (masking)
    # a whole (masked) answer as guardrails and accounting read it; the events are its parser's (usage)
    read_answer: Callable[[Body, list[StreamEvent]], Answer]
    streamed_answer: Callable[[Any], Body]  # a whole streamed answer (its core) as the body it would be
    hit_stream: Callable[[Body, RequestContext], bytes]  # a cached answer as the stream it would have been
    cacheable: Callable[[Body], bool] = always  # a request whose answer the response cache may keep
    answer_cacheable: Callable[[Body], bool] = always  # an answer worth keeping
    # `streamed_answer` is already what the client read (masked by the stream's own filter), so the
    # cache keeps it as it is; otherwise it is masked one-shot first (the same text)
    streamed_answer_masked: bool = False
    # the request with the answer's text so far as its trailing assistant turn (continuation, docs/continuation.md)
    prefill: Callable[[Body, str], Body] = prefill_messages
    owned: Owned | None = None  # answers kept upstream by id, bound to their creator


class _NoParser:
    """A cached answer has no upstream bytes to parse."""

    native = False  # (the Messages core asks whether it may read the upstream's bytes as they are)

    def parse(self, event: Any) -> list[Any]:
        return []

    def finish(self) -> list[Any]:
        return []


def replayed(served: ServedApi, obj: Body) -> bytes:
    """A whole answer in the API's shape as the stream it would have been, its end included: held by the
    API's own core and committed through an output filter that releases everything (a cache hit)."""
    stream = served.stream_core(_NoParser(), "cache")
    stream.hold_answer(obj, [])
    return stream.commit(served.output_filter(None, False)) + stream.finish()
