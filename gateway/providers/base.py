"""What every provider translator offers the pipeline. Translators are pure: they build requests and
parse bytes; `gateway.upstream` does the I/O.

Named `<client schema>_<backend>` (chat_openai, chat_anthropic, ...) so the folder listing is the
support matrix.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

import orjson

from gateway.core.chat.stream import ChatChunk, StreamParser
from gateway.core.events import Failure, FailureKind, InbandError, StreamEvent
from gateway.core.framing import SSE, Framing
from gateway.core.sse import DONE

# the chunk types and framings are the core's
__all__ = ["SSE", "ChatChunk", "Framing", "ParsedBody", "StreamParser", "UpstreamRequest"]

MAX_BODY_BYTES = 32 * 1024 * 1024  # docs/extensions.md, "Costs a client or an upstream can impose": a non-stream
# upstream body is at most 32 MiB


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    stream: bool
    # the client's cache markers dropped over Anthropic's limit (`convert.cache_markers`) or where Bedrock
    # Converse has no place for them (`convert.bedrock_converse.unplaced_markers`), for the log line
    cache_markers_dropped: int = 0


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """A non-stream answer in the client API's shape, and its typed events (usage, finish, errors)."""

    obj: dict[str, Any]
    events: list[StreamEvent]


class Translator(Protocol):
    """One cell of the support matrix: a client API's requests to one provider type, and its answers
    back in the client's shape (`providers/<api>_<type>.py`). Pure: it builds requests and parses bytes.

    `stream_parser()` is the parser the API's stream core reads (`core.stream.StreamCore`); `framing`
    says how the upstream's stream is cut into events (SSE, or a transcoder to it)."""

    @property
    def framing(self) -> Framing: ...

    @property
    def sends_stream_options(self) -> bool:
        """Whether `send_stream_options=True` puts the `stream_options` the gateway adds (to ask a chat
        server for usage, docs/extensions.md, "Streams"; docs/extensions.md, "Failure semantics") into a stream
        request."""

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        """`client_headers`: the client's headers the provider's `forward_headers` let through, for a
        translator that passes protocol headers on (`anthropic-version`, `anthropic-beta`)."""

    def stream_parser(self) -> Any: ...

    def parse_body(self, body: bytes) -> ParsedBody:
        """A non-stream answer in the client's shape, and its typed events (usage, finish, errors)."""

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure: ...


@runtime_checkable
class Embeds(Protocol):
    """A chat cell whose provider serves `POST /v1/embeddings` too."""

    def embeddings_request(self, body: Mapping[str, Any], model: str) -> UpstreamRequest: ...


@runtime_checkable
class CountsTokens(Protocol):
    """A Messages cell whose provider may count tokens (`POST /v1/messages/count_tokens`)."""

    def count_tokens_request(self, body: Mapping[str, Any], model: str,
                             client_headers: Mapping[str, str]) -> UpstreamRequest | None:
        """None: this deployment cannot count tokens (the route answers with an estimate)."""


@runtime_checkable
class TranslatesCount(Protocol):
    """A `CountsTokens` cell whose provider answers in its own shape (Bedrock's `{"inputTokens": N}`): the
    answer as the Messages API's `{"input_tokens": N}`."""

    def count_tokens_answer(self, body: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Unserved:
    """Why a cell cannot serve one request of its schema: a client error (400) naming the field."""

    message: str
    param: str


class PerRequest(Protocol):
    """A cell whose translation depends on the client's request beyond one call: the Responses bridge
    must know which tools were custom and what the final `response` object repeats, and cannot serve
    `previous_response_id` (state only an OpenAI Responses upstream keeps, docs/responses-bridge.md). It says so
    with `per_request = True`."""

    per_request: bool

    def unserved(self, body: Mapping[str, Any]) -> Unserved | None: ...

    def bind(self, body: Mapping[str, Any]) -> Translator:
        """This cell for one request: its parsers know the request."""


def _per_request(tr: Any) -> TypeGuard[PerRequest]:
    # a marker, not `isinstance` with a runtime protocol: that costs microseconds on every attempt
    return getattr(tr, "per_request", False) is True


def unserved(tr: Translator | None, body: Mapping[str, Any]) -> Unserved | None:
    return tr.unserved(body) if _per_request(tr) else None


def keeps_answers(tr: Translator | None) -> bool:
    """Whether the cell's upstream itself keeps what it answers, under an id a later request may name
    (an OpenAI Responses upstream: `previous_response_id`); a bridge keeps nothing. A marker attribute,
    read as `per_request` is."""
    return getattr(tr, "keeps_answers", False) is True


def bound(tr: Translator, body: Mapping[str, Any]) -> Translator:
    return tr.bind(body) if _per_request(tr) else tr


@dataclass(frozen=True, slots=True)
class Breakpoints:
    """What an Anthropic-format cell does with cache markers for one request (`convert.cache_markers.fit`)."""

    scan: bool = True  # the client may have sent markers: fit them to Anthropic's limits
    auto: bool = False  # with none from the client: add them (`prompt_cache: {breakpoints: auto}`)


FIT = Breakpoints()
# every setting, made once: a request picks one (`breakpoints_for`) instead of building it
_SETTINGS = {(scan, auto): FIT if (scan, auto) == (True, False) else Breakpoints(scan, auto)
             for scan in (True, False) for auto in (True, False)}


def breakpoints_for(scan: bool, auto: bool) -> Breakpoints:
    return _SETTINGS[scan, auto]


MARKER = "cache_control"  # a prompt-cache marker's key (docs/caching.md)
MARKER_KEY = b'"cache_control"'
# an escape spelling one of the key's letters (all ASCII) is `\u00` and two hex digits: searching for that
# rather than any `\u` is ~1.6x faster (English text is full of u's, each a false start of a two-byte
# search: 1.4 ns a byte) and no longer says yes to every body of escaped non-ASCII text
ESCAPED_ASCII = b"\\u00"
# either in a body's bytes: it may carry a marker (what `core.json_split` searches a big body's bytes for;
# a smaller body's parsed objects are looked up for the key as its depth is walked: `pipeline.request`)
MARKER_NEEDLES = (MARKER_KEY, ESCAPED_ASCII)


class AddsBreakpoints:
    """An Anthropic-format cell (`anthropic`, Bedrock, Vertex): its Messages body goes through
    `convert.cache_markers.fit` as its `breakpoints` say; `with_breakpoints` gives its twin for another
    setting, the one a request uses (docs/caching.md)."""

    breakpoints = FIT

    def with_breakpoints(self, breakpoints: Breakpoints) -> Any:
        twins: dict[Breakpoints, Any] | None = self.__dict__.get("_twins")
        if twins is None:
            twins = self.__dict__["_twins"] = {FIT: self}
        twin = twins.get(breakpoints)
        if twin is None:
            twin = twins[breakpoints] = copy.copy(self)
            twin.__dict__["_twins"] = twins
            twin.breakpoints = breakpoints
        return twin


def with_breakpoints(tr: Translator, breakpoints: Breakpoints) -> Translator:
    """`tr`'s twin for a request's `breakpoints`; `tr` itself when its provider takes no Anthropic
    markers (a class test: `getattr` with a default would build an AttributeError on every miss)."""
    if breakpoints is FIT or not isinstance(tr, AddsBreakpoints):
        return tr
    twin: Translator = tr.with_breakpoints(breakpoints)
    return twin


def json_value(data: bytes) -> Any:
    """An event's or a body's JSON (blank padding around a body allowed), or None when it is not JSON."""
    try:
        return orjson.loads(data.strip() or b"null")
    except orjson.JSONDecodeError:
        return None


def not_an_object(data: bytes) -> list[ChatChunk]:
    """What a translating parser reads from an event whose data is no JSON object: an OpenAI-style
    `[DONE]` (a relay in between may add one) ends the stream harmlessly; anything else is malformed."""
    if data[:6] == DONE:
        return [ChatChunk([], None, done=True)]
    bad = Failure(FailureKind.MALFORMED, "upstream sent an event that is not a JSON object")
    return [ChatChunk([InbandError(bad)], None)]
