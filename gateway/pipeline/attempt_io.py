"""Plumbing every attempt shares, whatever the API: the first-token deadline, the error-status check, and
reading a whole non-stream body."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from gateway.config.types import Deployment
from gateway.core.events import Failure, FailureKind, InbandError, StreamEvent
from gateway.core.framing import Transcoder
from gateway.pipeline.runtime import Runtime
from gateway.providers.base import MAX_BODY_BYTES, UpstreamRequest
from gateway.providers.retry_after import retry_after_s
from gateway.upstream import UpstreamError, UpstreamResponse

ERROR_BODY_LIMIT = 1024 * 1024
Classify = Callable[[int, Mapping[str, str], bytes], Failure]


class _Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closeable)
S = TypeVar("S")


@dataclass(slots=True)
class Opened(Generic[S]):
    """An attempt that reached its first output token: the upstream response (None for an answer
    re-emitted from a body), the API's stream core holding the preamble, and when the request left and
    the first token came."""

    deployment: Deployment
    response: UpstreamResponse | None
    stream: S
    t_sent: float
    t_first: float = 0.0

    def close(self) -> None:
        if self.response is not None:
            self.response.close()


class Transcoded:
    """An upstream stream in another framing, read as the SSE its API's stream core reads
    (`core.framing.Transcoder`): the same response surface, its bytes transcoded as they come."""

    __slots__ = ("_coder", "_ended", "_resp")

    def __init__(self, resp: UpstreamResponse, coder: Transcoder) -> None:
        self._resp, self._coder, self._ended = resp, coder, False

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    @property
    def is_event_stream(self) -> bool:
        return True

    @property
    def sent_at(self) -> float:
        return self._resp.sent_at

    @property
    def read_at(self) -> float:
        return self._resp.read_at

    async def next_chunk(self) -> bytes:
        """The next SSE bytes; b"" at the end. A read that completes no event is not an end: read on."""
        while not self._ended:
            data = await self._resp.next_chunk()
            if not data:
                self._ended = True
                return self._coder.end()
            out = self._coder.feed(data)
            if out:
                return out
        return b""

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes:
        return await self._resp.read_body(limit)

    def finish(self) -> None:
        self._resp.finish()

    def close(self) -> None:
        self._resp.close()


class FirstTokenDeadline:
    """`with FirstTokenDeadline(d) as dl: async with asyncio.timeout(s): opened = dl.track(...)`.

    When the deadline passes, the attempt fails as FIRST_TOKEN_TIMEOUT (never retried on the same
    deployment); on any failure, whatever the attempt opened is closed at once."""

    def __init__(self, d: Deployment):
        self.d = d
        self.opened: _Closeable | None = None

    def track(self, opened: C) -> C:
        self.opened = opened
        return opened

    def __enter__(self) -> FirstTokenDeadline:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            return
        if self.opened is not None:
            self.opened.close()
        if issubclass(kind, TimeoutError):
            raise UpstreamError(Failure(FailureKind.FIRST_TOKEN_TIMEOUT,
                                        f"{self.d.label}: no output token within first_token_s")) from None


async def raise_for_status(resp: UpstreamResponse, classify: Classify, label: str) -> None:
    """A non-200 answer is a classified failure (its body read up to a bound, for the error fields)."""
    if resp.status != 200:
        unexpected(resp.status, label)
        body = await resp.read_body(ERROR_BODY_LIMIT)
        raise UpstreamError(classify(resp.status, resp.headers, body))


def unexpected(status: int, label: str) -> None:
    """A provider call answers 200 or an error status. Any other 2xx or a 3xx (we follow no redirect;
    a 204 or 304 has no body to relay, RFC 9110 §15.3.5, §15.4.5) is a malformed answer: retried or
    fallen back like one, a 502 in the end, and never passed through with its status."""
    if status < 400:
        raise UpstreamError(Failure(FailureKind.MALFORMED, f"{label}: unexpected HTTP {status}", status=status))


def forwardable(rt: Runtime, d: Deployment, client_headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers (lower-case names) that `d`'s provider lets through (`forward_headers`).
    A translator that passes protocol headers on (the Messages API's `anthropic-beta`, and
    `anthropic-version`, which then replaces the configured one) is given only these, so the policy
    governs them as it governs every other client header."""
    return {name: client_headers[name] for name in rt.provider(d).forward_headers if name in client_headers}


def with_response_wait(failure: Failure, headers: Mapping[str, str]) -> Failure:
    """An in-band failure (inside a 200) with the wait its response's `Retry-After`/`retry-after-ms`
    asked for, when the error itself gave none: an upstream that rate-limits in-band may say when on
    the response it began (`headers`: lower-case names)."""
    if failure.retry_after_s is not None:
        return failure
    wait = retry_after_s(headers)
    return failure if wait is None else dataclasses.replace(failure, retry_after_s=wait)


def raise_inband(events: list[StreamEvent]) -> None:
    for e in events:
        if type(e) is InbandError:
            raise UpstreamError(e.failure)


class WholeAnswer:
    """A 200 answer already read whole, as the response surface a stream core's reader takes: its
    bytes in one chunk. A non-stream request that an upstream answered with a stream anyway is read
    through the API's stream core like any stream (docs/reference.md, Errors: in-band errors)."""

    __slots__ = ("_headers", "_left", "body", "read_at", "sent_at")

    def __init__(self, body: bytes, headers: Mapping[str, str], sent_at: float, read_at: float) -> None:
        self.body, self._headers, self._left = body, headers, body
        self.sent_at, self.read_at = sent_at, read_at  # the response's it was read from

    @property
    def status(self) -> int:
        return 200

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    @property
    def is_event_stream(self) -> bool:
        return self._headers.get("content-type", "").startswith("text/event-stream")

    async def next_chunk(self) -> bytes:
        data, self._left = self._left, b""
        return data

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes:
        data, self._left = self._left[:limit], b""
        return data

    def finish(self) -> None:
        self._left = b""

    def close(self) -> None:
        self._left = b""


async def fetch_whole(rt: Runtime, d: Deployment, req: UpstreamRequest, classify: Classify,
                      client_headers: Mapping[str, str]) -> WholeAnswer:
    """A whole non-stream answer with its headers, or the classified failure."""
    resp = await rt.upstream.open(rt.provider(d), req, d.label, client_headers)
    try:
        body = await resp.read_body()
    finally:
        resp.close()
    if resp.status != 200:
        unexpected(resp.status, d.label)
        raise UpstreamError(classify(resp.status, resp.headers, body[:ERROR_BODY_LIMIT]))
    return WholeAnswer(body, resp.headers, resp.sent_at, resp.read_at)


async def fetch_body(rt: Runtime, d: Deployment, req: UpstreamRequest, classify: Classify,
                     client_headers: Mapping[str, str]) -> bytes:
    """A whole non-stream answer, or the classified failure."""
    return (await fetch_whole(rt, d, req, classify, client_headers)).body
