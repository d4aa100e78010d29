"""What a handler receives and returns: the request (read whole), a response with a body, or a streamed
response whose headers leave with its first write (one segment fewer on the time to first token); and the
answers the server gives itself, before any handler ran (`error_answer`, `refusal_answer`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from gateway.core.http1_request import LAST_CHUNK, HeadSeen, RequestError, RequestHead, chunk, response_head
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.http import Refusals


class Channel(Protocol):
    """The connection a response is written to (`gateway.http.connection.HttpConnection`)."""

    closing: bool
    raw_body: bool  # a streamed body goes as its bytes alone: no head, no chunks (WebSocket mode's events)

    def send(self, data: bytes) -> bool: ...  # True: the client is slow, await `drained()`

    async def drained(self) -> None: ...

    def date(self) -> str: ...


class Request:
    """One request, read whole: what the server knows of it (head, body, the connection it came on). An
    application that keeps more on it subclasses it (`gateway.pipeline.exchange.GatewayRequest`) and
    builds it with its `Endpoint.make_request`."""

    __slots__ = ("body", "channel", "extra_headers", "head", "request_id", "t0")

    def __init__(self, head: RequestHead, body: bytes, channel: Channel):
        self.head, self.body, self.channel = head, body, channel
        self.request_id = ""
        self.t0 = 0.0
        # fields every response to this request carries (request id, rate-limit state, CORS); a
        # response's own fields of the same name win
        self.extra_headers: dict[str, str] = {}

    @property
    def method(self) -> str:
        return self.head.method

    @property
    def path(self) -> str:
        return self.head.path

    @property
    def headers(self) -> dict[str, str]:
        """Lower-case names."""
        return self.head.headers

    @property
    def content_length(self) -> int | None:
        return self.head.content_length

    def keeps_alive(self) -> bool:
        return self.head.keep_alive and not self.channel.closing


class Response:
    """A whole response, written in one piece after the handler returns; then `after`, if set, is called
    (what need not delay the answer: it runs before the connection reads on)."""

    __slots__ = ("after", "body", "headers", "status")

    def __init__(self, *, status: int = 200, body: bytes = b"", content_type: str | None = None,
                 headers: dict[str, str] | None = None):
        self.status, self.body = status, body
        self.after: Callable[[], None] | None = None
        self.headers = dict(headers) if headers else {}
        if content_type is not None:
            self.headers["Content-Type"] = content_type

    def encode(self, request: Request) -> bytes:
        headers = {**request.extra_headers, **self.headers} if request.extra_headers else self.headers
        head = response_head(self.status, headers, request.channel.date(), length=len(self.body),
                             keep_alive=request.keeps_alive(), http10=request.head.http10)
        return head if request.method == "HEAD" else head + self.body


def json_response(obj: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status=status, body=orjson.dumps(obj), content_type="application/json", headers=headers)


class StreamResponse:
    """A streamed body: chunked (HTTP/1.1) or up to the close (HTTP/1.0). `prepare` commits to the
    status; the head leaves with the first write; `write_eof` (or the server, after the handler
    returns) ends the body."""

    __slots__ = ("_channel", "_chunked", "_corked", "_head", "finished", "headers", "keep_alive", "prepared",
                 "status")

    def __init__(self, *, status: int = 200, headers: dict[str, str] | None = None):
        self.status = status
        self.headers = dict(headers) if headers else {}
        self.prepared = self.finished = False
        self.keep_alive = False
        self._chunked = True
        self._head = b""
        self._channel: Channel | None = None
        self._corked: list[bytes] | None = None

    async def prepare(self, request: Request) -> None:
        if self.prepared:
            return
        http10 = request.head.http10
        self.keep_alive = request.keeps_alive() and not http10  # an HTTP/1.0 body ends at the close
        self._chunked = not http10
        self._channel = request.channel
        self.prepared = True
        if request.channel.raw_body:
            self._chunked = False
            return
        headers = {**request.extra_headers, **self.headers} if request.extra_headers else self.headers
        self._head = response_head(self.status, headers, request.channel.date(), length=None,
                                   keep_alive=self.keep_alive, http10=http10)

    def cork(self) -> None:
        """Hold writes until `write_eof`, which sends them and the end of the body in one piece. Only for
        when everything to write is already in hand (nothing will wait between the writes): one
        syscall and one segment instead of several."""
        if not self.finished and self._corked is None:
            self._corked = []

    async def write(self, data: bytes) -> None:
        if not data:
            return
        if self._corked is not None:
            self._corked.append(data)
            return
        await self._send(chunk(data) if self._chunked else data)

    async def write_eof(self, data: bytes = b"") -> None:
        if self.finished:
            return
        self.finished = True
        corked, self._corked = self._corked, None
        if corked:
            data = b"".join([*corked, data])
        body = (chunk(data) if data else b"") + LAST_CHUNK if self._chunked else data
        await self._send(body)

    async def _send(self, data: bytes) -> None:
        channel = self._channel
        if channel is None:
            raise RuntimeError("write before prepare")
        if self._head:
            data, self._head = self._head + data, b""
        if channel.send(data):
            await channel.drained()


def error_answer(err: GatewayError, date: str, *, retry_after: bool = False) -> bytes:
    """A refusal the server answers itself, before any handler ran, in OpenAI's error shape."""
    body = err.json_bytes()
    # an answer before any handler ran still carries a request id (one drawn here: nothing was read to
    # take the client's from, or no application says how), so every answer can be quoted in a support request
    headers = {"Content-Type": "application/json", "x-request-id": os.urandom(16).hex()}
    if retry_after:
        headers["Retry-After"] = "1"
    return response_head(err.status, headers, date, length=len(body), keep_alive=False, http10=False) + body


_CODES = {413: "request_too_large", 426: "upgrade_required"}  # docs/reference.md, "Routes" codes; else invalid_request


def refusal_answer(exc: RequestError, seen: HeadSeen | None, refusals: Refusals | None, date: str) -> bytes:
    """The answer to a request the server refused: in its route's error shape, with the client's request id,
    when the head was read far enough to name its path (the application's `Refusals`: docs/messages.md,
    Errors); else OpenAI's shape and a drawn id."""
    err = GatewayError(exc.message, status=exc.status, code=_CODES.get(exc.status, "invalid_request"),
                       type="invalid_request_error" if exc.status < 500 else "api_error")
    if refusals is None or seen is None:
        return error_answer(err, date)
    answer = refusals.refusal(err, seen)
    return response_head(answer.status, answer.headers, date, length=len(answer.body),
                         keep_alive=False, http10=False) + answer.body
