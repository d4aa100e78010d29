"""The only module that does outbound I/O: open an upstream request, hand back raw bytes.

aiohttp's exceptions are translated here, at the boundary (like httpcore's `map_exceptions`), into one
`UpstreamError` carrying a classified `Failure`; nothing inward ever sees an aiohttp type. Messages
name the deployment, never a URL or address (CONTRACT §5.3). Redirects are never followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import aiohttp
import orjson
import yarl

from gateway.config_types import ProviderConfig, Timeouts
from gateway.core.events import Failure, FailureKind
from gateway.providers.base import MAX_BODY_BYTES, UpstreamRequest
from gateway.providers.mock import MockScript, mock_script

FINISH_WAIT_S = 1.0
FINISH_MAX_BYTES = 64 * 1024


class UpstreamError(Exception):
    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


class UpstreamResponse(Protocol):
    status: int
    headers: Mapping[str, str]  # lower-case keys

    @property
    def is_event_stream(self) -> bool: ...

    async def next_chunk(self) -> bytes: ...  # b"" at end of stream

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes: ...

    def finish(self) -> None: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def map_exceptions(label: str) -> Iterator[None]:
    """aiohttp/OS errors -> UpstreamError with a client-safe message naming the deployment."""
    try:
        yield
    except Exception as exc:
        mapped = upstream_error(exc, label)
        if mapped is None:
            raise
        raise mapped from None


def upstream_error(exc: BaseException, label: str) -> UpstreamError | None:
    """The UpstreamError an aiohttp/OS error means (None: not an I/O error, let it through)."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamError(Failure(FailureKind.CONNECT, f"{label}: timed out connecting"))
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return UpstreamError(Failure(FailureKind.IDLE_TIMEOUT, f"{label}: upstream went idle"))
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return UpstreamError(Failure(FailureKind.EARLY_EOF, f"{label}: upstream closed the connection"))
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamError(Failure(FailureKind.CONNECT, f"{label}: cannot connect"))
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return UpstreamError(Failure(FailureKind.CONNECT, f"{label}: connection failed"))
    if isinstance(exc, TimeoutError):
        return UpstreamError(Failure(FailureKind.TOTAL_TIMEOUT, f"{label}: total time exceeded"))
    return None


_FINISHING: set[asyncio.Task[None]] = set()  # strong references to the detached drains


class HttpResponse:
    __slots__ = ("_eof", "_finishing", "_label", "_resp", "headers", "status")

    def __init__(self, resp: aiohttp.ClientResponse, label: str):
        self._resp, self._label = resp, label
        self._eof = False
        self._finishing = False
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.headers.items()}

    @property
    def is_event_stream(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    async def next_chunk(self) -> bytes:
        # try/except, not `map_exceptions`: a context manager costs ~1.5 µs, and this runs per read
        try:
            data = await self._resp.content.readany()
        except Exception as exc:
            mapped = upstream_error(exc, self._label)
            if mapped is None:
                raise
            raise mapped from None
        if not data:
            self._eof = True
        return data

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes:
        parts: list[bytes] = []
        size = 0
        while chunk := await self.next_chunk():
            size += len(chunk)
            if size > limit:
                raise UpstreamError(Failure(FailureKind.MALFORMED, f"{self._label}: upstream body too large"))
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """A response read to its end goes back to the keep-alive pool; an unfinished one is closed, so it
        never returns half-read and the upstream sees the drop at once (CONTRACT §4.7)."""
        if self._finishing:
            return  # the detached drain releases or closes it
        if self._eof:
            self._resp.release()
        elif not self._resp.closed:
            self._resp.close()

    def finish(self) -> None:
        """The protocol has ended (`[DONE]`): read what is left of the HTTP body — usually only the
        chunked terminator, often in a write of its own — so the connection can be reused. Detached and
        bounded, so neither the client nor a client that hangs up at `[DONE]` waits for it."""
        if self._eof or self._resp.closed:
            self.close()
            return
        self._finishing = True
        task = asyncio.ensure_future(self._drain())
        _FINISHING.add(task)
        task.add_done_callback(_FINISHING.discard)

    async def _drain(self) -> None:
        try:
            async with asyncio.timeout(FINISH_WAIT_S):
                size = 0
                while size <= FINISH_MAX_BYTES and (chunk := await self.next_chunk()):
                    size += len(chunk)
        except (TimeoutError, UpstreamError):
            pass
        finally:
            self._finishing = False
            self.close()


class MockResponse:
    """Plays a `MockScript` with its pacing; same surface as an HTTP response."""

    __slots__ = ("_parts", "_pos", "headers", "status")

    def __init__(self, script: MockScript):
        self.status = script.status
        self.headers = {"content-type": script.content_type}
        self._parts, self._pos = script.parts, 0

    @property
    def is_event_stream(self) -> bool:
        return self.headers["content-type"] == "text/event-stream"

    async def next_chunk(self) -> bytes:
        if self._pos >= len(self._parts):
            return b""
        delay, data = self._parts[self._pos]
        self._pos += 1
        if delay > 0:
            await asyncio.sleep(delay)
        out = [data]
        while self._pos < len(self._parts) and self._parts[self._pos][0] == 0:
            out.append(self._parts[self._pos][1])  # what arrives together is read together
            self._pos += 1
        return b"".join(out)

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes:
        parts = []
        while chunk := await self.next_chunk():
            parts.append(chunk)
        return b"".join(parts)

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        self._pos = len(self._parts)


class Upstream:
    """Owns the shared ClientSession (one per app, keep-alive pooled)."""

    def __init__(self, session: aiohttp.ClientSession):
        self.session = session

    @staticmethod
    def create_session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30.0,
                                         enable_cleanup_closed=True)
        # DummyCookieJar: a proxy must not replay one upstream's cookies into every client's requests
        return aiohttp.ClientSession(connector=connector, auto_decompress=True, trust_env=False,
                                     cookie_jar=aiohttp.DummyCookieJar(),
                                     skip_auto_headers=("User-Agent",), json_serialize=_dumps)

    async def open(self, provider: ProviderConfig, req: UpstreamRequest, label: str) -> UpstreamResponse:
        if provider.type == "mock":
            return MockResponse(mock_script(provider, req.url, req.body))
        timeout = _timeout(provider.timeouts, req.stream)
        with map_exceptions(label):
            resp = await self.session.request(req.method, _url(req.url), data=req.body, headers=req.headers,
                                              timeout=timeout, allow_redirects=False)
        return HttpResponse(resp, label)

    async def post_json(self, url: str, payload: Any, timeout_s: float, label: str) -> Any:
        """A small JSON call (webhook guardrails). Raises UpstreamError on any failure."""
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        with map_exceptions(label):
            async with self.session.post(url, data=orjson.dumps(payload), timeout=timeout,
                                         headers={"content-type": "application/json"},
                                         allow_redirects=False) as resp:
                body = await resp.content.read(1024 * 1024)
                if resp.status != 200:
                    raise UpstreamError(Failure(FailureKind.HTTP_5XX, f"{label}: HTTP {resp.status}",
                                                status=resp.status))
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise UpstreamError(Failure(FailureKind.MALFORMED, f"{label}: not JSON")) from None


@functools.lru_cache(maxsize=1024)
def _url(url: str) -> yarl.URL:
    """Upstream URLs come from config (base URL, path, deployment): parse each once, not per request."""
    return yarl.URL(url)


@functools.lru_cache(maxsize=256)
def _timeout(t: Timeouts, stream: bool) -> aiohttp.ClientTimeout:
    """idle_s is the stream watchdog (aiohttp re-arms sock_read on every read); a non-stream answer
    sends nothing until it is done, so only total_s bounds it. Built once per provider and kind."""
    return aiohttp.ClientTimeout(total=t.total_s, connect=t.connect_s, sock_read=t.idle_s if stream else None)


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()
