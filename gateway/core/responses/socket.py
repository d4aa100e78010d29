"""The Responses API's WebSocket mode, one connection's state (pure; docs/reference.md, WebSocket mode):
what a client message asks for, how `previous_response_id` is continued from what the connection keeps,
the warm-up answer (`generate: false`), error events, and the HTTP stream's SSE bytes cut into the
messages the socket carries (one JSON event each, in order).

Why the connection keeps the conversation: Codex sends each turn's new items only, naming the previous
response. Only an OpenAI Responses upstream could continue from its own id; keeping the last response's
input and output here lets every backend (the bridge to Anthropic, Gemini, Bedrock, chat-only servers)
serve the turn as a whole request, and an OpenAI Responses upstream is sent the whole input over HTTP
too, so every backend is served the same way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core.body_scan import NOTHING, Scan
from gateway.core.json_body import (
    CONTAINERS_MESSAGE,
    MAX_CONTAINERS,
    NOT_JSON_MESSAGE,
    NOT_OBJECT_MESSAGE,
    BodyError,
    encoded_size,
)
from gateway.core.json_split import SplitParse
from gateway.core.websocket import text_frame

TERMINAL = (b"response.completed", b"response.incomplete", b"response.failed")
_WATCHED = (b"response.completed", b"response.incomplete", b"response.failed", b"error")
_WATCHED_NAMES = frozenset(n.decode() for n in _WATCHED)
# the ends a connection keeps to continue from: a response cut short by `max_output_tokens` or a content
# filter (`incomplete`) is one too, as OpenAI continues it (docs/reference.md, WebSocket mode)
_KEPT = (b"response.completed", b"response.incomplete")
_KEPT_NAMES = frozenset(n.decode() for n in _KEPT)
MAX_PENDING_EVENT = 16 * 1024 * 1024  # bytes of one SSE event awaiting its end (ours are whole writes)


class SocketMessageError(ValueError):
    """A client message that asks for nothing we serve: an `error` event, the connection stays usable."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Create:
    """A `response.create`: the Responses create body (without `type` and `generate`), streamed."""

    body: dict[str, Any]
    generate: bool


def read_message(text: str) -> Create:
    """A client message, held to an HTTP body's container bound before it is parsed: orjson builds every
    container of a message in one call the loop cannot interleave (a 9 MiB message of empty arrays held
    it ~0.7 s; at the bound, ~30 ms), core.json_body.MAX_CONTAINERS."""
    if len(text) > MAX_CONTAINERS and text.count("{") + text.count("[") > MAX_CONTAINERS:
        raise SocketMessageError(CONTAINERS_MESSAGE)
    return created(_loaded(text))


def read_split(split: SplitParse, raw: bytes) -> Create:
    """A big message (its bytes, `core.websocket.STEPPED_BYTES`) read as `read_message` reads a small one,
    once `split` (over `raw`) has run its steps: parsed whole when it could not be split (its containers
    were counted by the split, and bounded)."""
    return created(split.body if split.body is not None else _loaded(raw))


def split_error(exc: BodyError) -> SocketMessageError:
    """A big message refused by its split parse, in `read_message`'s words."""
    text = str(exc)
    if text == NOT_JSON_MESSAGE:
        return SocketMessageError("the message is not JSON")
    if text == NOT_OBJECT_MESSAGE:
        return SocketMessageError("the message must be a JSON object")
    return SocketMessageError(text)


def _loaded(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise SocketMessageError("the message is not JSON") from None


def created(obj: Any) -> Create:
    """The `response.create` a parsed message asks for (the nested spelling of early clients unwrapped),
    streamed, or the error it is."""
    if not isinstance(obj, dict):
        raise SocketMessageError("the message must be a JSON object")
    kind = obj.pop("type", None)
    if kind != "response.create":
        raise SocketMessageError("only response.create messages are served", param="type")
    if isinstance(obj.get("response"), dict):  # the nested spelling of early clients
        obj = {**obj.pop("response"), **obj}
    generate = obj.pop("generate", True)
    if not isinstance(generate, bool):
        raise SocketMessageError("generate must be a boolean", param="generate")
    obj["stream"] = True
    obj.pop("background", None)  # a socket's response is streamed on it
    return Create(obj, generate)


def _items(value: Any) -> list[Any]:
    """`input` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return list(value)
    raise SocketMessageError("input must be a string or an array", param="input")


# a string `input`, kept as the one user message it means: a list holding an object, 3 levels deep in a body
STRING_INPUT = Scan(2, 3, False)


@dataclass(slots=True)
class Conversation:
    """The connection's last response: its id, the whole input it answered and its output items, and
    what the walks of the parts they came in found (`core.body_scan.Scan`)."""

    last_id: str | None = None
    items: list[Any] = field(default_factory=list)
    continued: int = 0  # requests that continued from the connection's last response (the log says)
    scan: Scan = NOTHING
    joined: int = 0  # the bytes of `items` as JSON, commas between them and no brackets (`body_size`)
    _input: Scan = NOTHING  # the scan of the input of the response under way (one at a time)
    _input_joined: int = -1  # its input's bytes as `joined` counts them (-1: not counted by `body_size`)
    _continuing: bool = False  # its body's `input` begins with `items` (`expand` put them there)

    def expand(self, body: dict[str, Any], own: Scan, given: Scan) -> tuple[list[Any], Scan]:
        """A body naming the connection's last response gets that response's input and output before its
        own new items, and no `previous_response_id` (the upstream is sent the whole conversation). Any
        other id is left alone (as over HTTP: an OpenAI Responses upstream's own, checked against its
        creator). Returns the request's whole input, and the whole body's scan, given the message's own
        (`body_scans`: its fields, and its `input` as given)."""
        given_input = body.get("input")
        new = _items(given_input)
        self._input = STRING_INPUT if isinstance(given_input, str) else given
        self._input_joined, self._continuing = -1, False
        if self.last_id is not None and body.get("previous_response_id") == self.last_id:
            del body["previous_response_id"]
            self.continued += 1
            self._continuing = True
            whole = [*self.items, *new]
            body["input"] = whole
            self._input = self.scan.joined(self._input)
            return whole, own.joined(self._input)
        return new, own.joined(given)

    def keep(self, response_id: str, whole_input: list[Any], output: list[Any], output_scan: Scan) -> None:
        """After a response ended: only the last one is kept (docs/reference.md, WebSocket mode), with the
        scans of its input (from `expand`) and of its output (`output_scan`)."""
        self.last_id = response_id
        self.items = [*whole_input, *output]
        self.scan = self._input.joined(output_scan)
        counted = self._input_joined if self._input_joined >= 0 else joined_size(whole_input)
        self.joined = _join(counted, joined_size(output))

    def forget(self) -> None:
        self.last_id, self.items, self.scan, self.joined = None, [], NOTHING, 0

    def body_size(self, body: dict[str, Any]) -> int:
        """`len(encode(body))` for the body `expand` returned, without encoding the kept items again:
        their bytes were counted when they were kept (`joined`), so a turn encodes its own fields and new
        items only, not the whole conversation (the size bound is the HTTP body's, byte for byte). Raises
        `orjson.JSONEncodeError` as `encode` does."""
        given = body.get("input")
        if isinstance(given, str):
            return self._string_body_size(body, given)
        if not isinstance(given, list):  # none: as given
            return encoded_size(body)
        body["input"] = []
        try:
            outer = encoded_size(body)  # its fields, and `[]`: the items go between the brackets
        finally:
            body["input"] = given
        kept = len(self.items) if self._continuing else 0
        self._input_joined = _join(self.joined if kept else 0, joined_size(given[kept:]))
        return outer + self._input_joined

    def _string_body_size(self, body: dict[str, Any], given: str) -> int:
        """`body_size` for a string `input`: its text encoded once, for the body's size and for the one
        message it is kept as (`_items`: `joined` then needs no encoding of it in `keep`)."""
        text = encoded_size(given)  # a `JsonText` by its literal's length, not copied
        body["input"] = ""
        try:
            outer = encoded_size(body) - 2  # its fields, and the `""` the text goes into
        finally:
            body["input"] = given
        self._input_joined = _MESSAGE_HEAD + text + 1  # the closing brace
        return outer + text


# the bytes the message `_items` makes of a string input has before its text (`""}`: the text's quotes and
# the closing brace, counted with the text and after it)
_MESSAGE_HEAD = encoded_size(_items("")[0]) - 3


def joined_size(items: list[Any]) -> int:
    """The bytes of `items` as JSON between an array's brackets (commas included): 0 for none."""
    return encoded_size(items) - 2 if items else 0


def _join(first: int, second: int) -> int:
    """The `joined_size` of two runs of items, one after the other (a comma between when both have some)."""
    return first + second + 1 if first and second else first + second


def warmup_events(body: dict[str, Any]) -> tuple[str, list[str]]:
    """`generate: false` (Codex's warm-up): a response created and completed with no output, no model
    call. Returns its id and the events' JSON texts."""
    rid = "resp_" + os.urandom(16).hex()
    resp: dict[str, Any] = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "in_progress",
            "model": body.get("model"), "output": [], "usage": None, "error": None,
            "previous_response_id": body.get("previous_response_id"), "instructions": body.get("instructions"),
            "metadata": body.get("metadata") or {}}
    created = {"type": "response.created", "sequence_number": 0, "response": resp}
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
             "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}
    done = {"type": "response.completed", "sequence_number": 1,
            "response": {**resp, "status": "completed", "usage": usage}}
    return rid, [orjson.dumps(created).decode(), orjson.dumps(done).decode()]


# the fields of an HTTP answer a client acts on that a socket's error event carries, as OpenAI's own do
# (`headers`, which Codex reads its retry delay from): when to retry (seconds), and whether to at all
CARRIED_HEADERS = ("retry-after", "x-should-retry")


def error_event(code: str, message: str, param: str | None = None, status: int | None = None,
                headers: dict[str, str] | None = None, kind: str | None = None) -> str:
    """An `error` event in the Responses stream's shape: the flat `code`/`message`/`param` and the nested
    `error` object the SDKs read (`kind`: its `type`, as HTTP's body has it); `status` the HTTP status the
    same error has over HTTP, and `headers` those of its HTTP answer's fields a client acts on
    (`CARRIED_HEADERS`, names in lower case): a 429's `retry-after` seconds reach a socket's client too."""
    err = {"type": kind or ("invalid_request_error" if status is None or status < 500 else "api_error"),
           "code": code, "message": message, "param": param}
    obj: dict[str, Any] = {"type": "error", "code": code, "message": message, "param": param, "error": err}
    if status is not None:
        obj["status"] = status
    carried = {name.lower(): value for name, value in (headers or {}).items() if name.lower() in CARRIED_HEADERS}
    if carried:
        obj["headers"] = carried
    return orjson.dumps(obj).decode()


def error_from_body(status: int, body: bytes, headers: dict[str, str] | None = None) -> str:
    """A refused request's JSON error body (`{"error": {...}}`) and its answer's fields as an `error` event."""
    try:
        err = orjson.loads(body).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        err = {}
    kind = err.get("type")
    return error_event(str(err.get("code") or "upstream_error"), str(err.get("message") or "request failed"),
                       err.get("param"), status, headers, kind if isinstance(kind, str) else None)


@dataclass(slots=True)
class Ended:
    """The terminal event's response: id and output items (what the connection keeps)."""

    response_id: str
    output: list[Any]


class EventCutter:
    """The HTTP stream's bytes (SSE, as the serve path writes them) cut into its events' `data` texts.
    Comments (keep-alives) are dropped: a socket has pings. The terminal event's response is kept."""

    __slots__ = ("_buf", "ended", "failed")

    def __init__(self) -> None:
        self._buf = b""
        self.ended: Ended | None = None
        self.failed = False  # an `error` or `response.failed` event went out

    def feed(self, data: bytes) -> list[bytes]:
        """The `data` of each event completed by `data`, in order."""
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        find, start = buf.find, 0
        while (end := find(b"\n\n", start)) >= 0:
            # the serve path's own shape (core.sse.encode_event): `event: <name>`, one data line
            mid = find(b"\ndata: ", start, end) if buf.startswith(b"event: ", start) else -1
            if mid > 0 and find(b"\n", mid + 7, end) < 0:
                payload = buf[mid + 7:end]
                if buf.startswith(_WATCHED, start + 7):  # a terminal or error event, perhaps
                    self._watch(buf[start + 7:mid], payload)
                out.append(payload)
            elif (text := self._event(buf[start:end])) is not None:
                out.append(text)
            start = end + 2
        self._buf = buf[start:]
        if len(self._buf) > MAX_PENDING_EVENT:
            raise ValueError("an event without an end")
        return out

    def frames(self, data: bytes) -> bytes:
        """The same events as WebSocket text frames, in one piece."""
        return b"".join([text_frame(p) for p in self.feed(data)])

    def frame(self, name: str, payload: bytes, obj: dict[str, Any]) -> bytes:
        """One event the serve path hands over whole (`core.responses.filter.EVENT_ENCODER`), as its
        text frame: no SSE to encode and cut apart again. Watched as `feed` watches the SSE events, the
        terminal one's response read from its object (a response echoes the request's instructions and
        tools: its JSON is as big as the request's, and parsing it again cost as much)."""
        if name in _WATCHED_NAMES:
            if name in _KEPT_NAMES:
                self._ended(obj.get("response"))
            else:
                self.failed = True
        return text_frame(payload)

    def _watch(self, name: bytes, payload: bytes) -> None:
        if name in TERMINAL or name == b"error":
            self._terminal(name, payload)

    def _event(self, block: bytes) -> bytes | None:
        """Any other SSE shape: every `data` line, joined."""
        name = b""
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
            elif line.startswith(b"event:"):
                name = line[6:].strip()
        if not data:
            return None
        payload = b"\n".join(data)
        if name in TERMINAL or name == b"error":
            self._terminal(name, payload)
        return payload

    def _terminal(self, name: bytes, payload: bytes) -> None:
        if name not in _KEPT:
            self.failed = True
            return
        try:
            resp = orjson.loads(payload).get("response")
        except (orjson.JSONDecodeError, AttributeError):
            return
        self._ended(resp)

    def _ended(self, resp: Any) -> None:
        if isinstance(resp, dict) and isinstance(resp.get("id"), str) and isinstance(resp.get("output"), list):
            self.ended = Ended(resp["id"], resp["output"])
