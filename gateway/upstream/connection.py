"""One upstream HTTP/1.1 connection (an asyncio protocol), the keep-alive pool, and the response read
over it. Framing is read by the sans-I/O `framing.ResponseFramer` (llhttp under our policy); timers are
armed lazily (see HttpResponse)."""

from __future__ import annotations

import asyncio
import socket
import time
import zlib
from typing import Any, cast

from gateway.core.events import Failure, FailureKind
from gateway.core.http1 import HTTPError, ResponseHead
from gateway.http.turns import TURNS
from gateway.providers.base import MAX_BODY_BYTES
from gateway.upstream.errors import UpstreamError
from gateway.upstream.framing import ResponseFramer

PoolKey = tuple[str, str, int, str]  # scheme, host, port, the proxy's key ("" for a direct connection)
FINISH_WAIT_S = 1.0
FINISH_MAX_BYTES = 64 * 1024
_FINISHING: set[asyncio.Task[None]] = set()  # strong references to the detached drains
HIGH_WATER = 256 * 1024  # body bytes buffered before reading from the upstream pauses
KEEPALIVE_S = 30.0  # an idle pooled connection older than this is closed, not reused
MAX_IDLE_PER_HOST = 256
DECODED_CHUNK = 256 * 1024  # most bytes one `next_chunk` inflates: a gzip bomb expands a read by ~1000x


class _Conn(asyncio.Protocol):
    """One upstream connection. Per request: the response head, then decoded body pieces, with flow
    control (reading pauses above HIGH_WATER bytes read until the relay takes them)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, key: PoolKey):
        self.loop, self.key = loop, key
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.busy = False
        self.idle_since = 0.0
        self.last_data = 0.0  # when the last read came (perf_counter): the idle watchdog's and `read_at`
        self.head: ResponseHead | None = None
        self.framer: ResponseFramer | None = None
        self.pieces: list[bytes] = []  # the framer's list: body pieces not taken yet
        self.size = 0
        self.eof = False
        self.answered = False  # a byte of the current response has come
        self.failure: FailureKind | None = None
        self.waiter: asyncio.Future[None] | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def begin(self) -> None:
        self.framer = framer = ResponseFramer()
        self.busy, self.head, self.pieces, self.size = True, None, framer.pieces, 0
        self.eof, self.failure, self.answered = False, None, False

    def data_received(self, data: bytes) -> None:
        self.last_data = time.perf_counter()
        self.answered = True
        framer = self.framer
        if not self.busy or framer is None:  # bytes on an idle pooled connection: never trusted again
            self._close()
            return
        try:
            framer.feed(data)
        except HTTPError:
            self._fail(FailureKind.MALFORMED)
            return
        if self.head is None:
            self.head = framer.head
            if self.head is None:
                return
        self.size += len(data)  # bytes read, not body bytes: flow control needs no exact count
        if self.size > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        if framer.done:
            self.eof = True
        self.wake()

    def take(self) -> bytes:
        pieces = self.pieces
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()  # the framer appends to this very list
        self.size = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.busy and not self.eof:
            if self.framer is not None and self.framer.until_close and self.head is not None:
                self.eof = True  # a body framed by the connection's end (RFC 9112 §6.3)
            elif self.failure is None:
                # closed or reset before any byte of the answer: the request never got an answer, as
                # when the connection fails (a stale pooled connection, a restarting upstream)
                self.failure = FailureKind.EARLY_EOF if self.answered else FailureKind.CONNECT
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, kind: FailureKind) -> None:
        if self.failure is None:
            self.failure = kind
        self._close()
        self.wake()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    @property
    def reusable(self) -> bool:
        """Only a message read exactly to its end, on a connection both sides keep (RFC 9112 §9.3); a
        rejected framing (CL with TE, bytes past the end) never goes back to the pool."""
        framer = self.framer
        return (not self.lost and self.eof and self.failure is None and self.head is not None
                and self.head.keep_alive and framer is not None and framer.done and not framer.extra
                and self.transport is not None and not self.transport.is_closing())


class _Pool:
    """Idle keep-alive connections per (scheme, host, port, proxy), newest first out."""

    def __init__(self) -> None:
        self._idle: dict[PoolKey, list[_Conn]] = {}

    def take(self, key: PoolKey, now: float) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.lost and now - conn.idle_since < KEEPALIVE_S and conn.transport is not None \
                    and not conn.transport.is_closing():
                return conn
            conn._close()
        return None

    def give(self, conn: _Conn, now: float) -> None:
        conn.busy, conn.idle_since = False, now
        if conn.pieces:
            conn.take()  # what the last reader left (and reading resumed, if it was paused)
        idle = self._idle.setdefault(conn.key, [])
        idle.append(conn)
        if len(idle) > MAX_IDLE_PER_HOST:
            idle.pop(0)._close()

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn._close()
        self._idle.clear()


_FAILURE_TEXT = {FailureKind.EARLY_EOF: "upstream closed the connection",
                 FailureKind.MALFORMED: "upstream sent a broken HTTP response",
                 FailureKind.IDLE_TIMEOUT: "upstream went idle",
                 FailureKind.TOTAL_TIMEOUT: "total time exceeded",
                 FailureKind.CONNECT: "connection failed"}


class HttpResponse:
    """One upstream response on a pooled connection. Timers are armed lazily: the idle watchdog only
    while waiting for bytes (like a socket read timeout), re-armed from the last data, so a busy
    stream costs no timer per read."""

    __slots__ = ("_closed", "_conn", "_decoder", "_finishing", "_idle_s", "_label", "_pool", "_total",
                 "_wait_from", "_watchdog", "headers", "sent_at", "status")

    def __init__(self, conn: _Conn, pool: _Pool, label: str, idle_s: float | None, total_s: float):
        self._conn, self._pool, self._label, self._idle_s = conn, pool, label, idle_s
        self._finishing = False
        self._closed = False  # the connection went back to the pool or was closed: no longer ours
        self._decoder: Any = None  # a zlib decompressobj for a gzip or deflate body
        self._watchdog: asyncio.TimerHandle | None = None
        self._wait_from = 0.0
        self._total = conn.loop.call_later(total_s, self._on_total)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.sent_at = 0.0  # set by the sender once the request is written (`UpstreamResponse.sent_at`)

    async def start(self) -> None:
        """Wait for the response head."""
        conn = self._conn
        while conn.head is None:
            self._raise_failure()
            await self._wait()
        self.status, self.headers = conn.head.status, conn.head.headers
        coding = self.headers.get("content-encoding", "identity").lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            self._decoder = zlib.decompressobj(31 if "gzip" in coding else 15)
        elif coding != "identity":
            raise UpstreamError(Failure(FailureKind.MALFORMED, f"{self._label}: unsupported content-encoding"))

    @property
    def is_event_stream(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    @property
    def read_at(self) -> float:
        return self._conn.last_data

    async def next_chunk(self) -> bytes:
        if self._decoder is not None:
            return await self._next_decoded()
        conn = self._conn
        while True:
            if conn.pieces:
                return conn.take()
            if conn.eof:
                self._total.cancel()
                return b""
            self._raise_failure()
            await self._wait()

    async def _next_decoded(self) -> bytes:
        """A compressed body (we ask for identity; some servers compress anyway), inflated at most
        DECODED_CHUNK bytes at a time: input zlib has not consumed yet stays in `unconsumed_tail`, so a
        small read can never expand into a large allocation, and read_body's limit bounds the total."""
        decoder, conn = self._decoder, self._conn
        while True:
            data = decoder.unconsumed_tail
            if not data:
                if conn.pieces:
                    data = conn.take()
                elif conn.eof:
                    self._total.cancel()
                    self._decoder = None  # later calls read the (ended) raw body
                    return self._inflate(decoder.flush)  # what zlib still holds: at most one match
                else:
                    self._raise_failure()
                    await self._wait()
                    continue
            out = self._inflate(decoder.decompress, data, DECODED_CHUNK)
            if out:
                return out  # else zlib took the bytes without output yet (a gzip header): read on

    def _inflate(self, step: Any, *args: Any) -> bytes:
        try:
            return bytes(step(*args))
        except zlib.error:
            raise UpstreamError(Failure(FailureKind.MALFORMED, f"{self._label}: broken compressed body")) from None

    async def _wait(self) -> None:
        conn = self._conn
        conn.waiter = conn.loop.create_future()
        self._wait_from = time.perf_counter()
        if self._idle_s is not None and self._watchdog is None:
            self._watchdog = conn.loop.call_later(self._idle_s, self._on_idle)
        try:
            await conn.waiter
        finally:
            conn.waiter = None
        if TURNS.over(conn.loop):  # woken with bytes: run them in a turn not spent yet (see http/turns.py)
            await TURNS.wait(conn.loop)

    def _on_idle(self) -> None:
        conn, idle_s = self._conn, self._idle_s
        self._watchdog = None
        if conn.waiter is None or idle_s is None:
            return
        quiet = time.perf_counter() - max(self._wait_from, conn.last_data)
        if quiet >= idle_s:
            conn._fail(FailureKind.IDLE_TIMEOUT)
        else:
            self._watchdog = conn.loop.call_later(idle_s - quiet, self._on_idle)

    def _on_total(self) -> None:
        if not self._conn.eof:
            self._conn._fail(FailureKind.TOTAL_TIMEOUT)

    def _raise_failure(self) -> None:
        kind = self._conn.failure
        if kind is not None:
            raise UpstreamError(Failure(kind, f"{self._label}: {_FAILURE_TEXT[kind]}"))

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
        never returns half-read and the upstream sees the drop at once (docs/extensions.md, "Failure semantics")."""
        if self._finishing or self._closed:
            return  # the detached drain releases or closes it; or it is done already
        self._closed = True
        self._total.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        conn = self._conn
        if conn.reusable and conn.busy:
            self._pool.give(conn, conn.loop.time())
        else:
            conn.busy = False
            conn._close()

    def finish(self) -> None:
        """The protocol has ended (`[DONE]`): read what is left of the HTTP body — usually only the
        chunked terminator, often in a write of its own — so the connection can be reused. Detached and
        bounded, so neither the client nor a client that hangs up at `[DONE]` waits for it."""
        if self._conn.eof or self._conn.lost or self._closed:
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
