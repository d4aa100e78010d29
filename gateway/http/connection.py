"""One client connection: read requests (sans-I/O `RequestReader`), run each in its own task, write its
response, keep the connection for the next one. A request's task starts eagerly (`eager.py`): its first
step, up to the upstream write, runs in the read callback that completed it.

Reading continues while a handler runs, so a client that goes away is seen at once (its handler is
cancelled, which closes the upstream request: docs/extensions.md, "Failure semantics"); bytes of a next request
(pipelining) wait until the response is complete. Writes pause the handler while the socket's buffer is above the
transport's high-water mark, so a slow client holds back its own stream instead of growing memory.
A WebSocket handshake goes to the server's upgrader (`upgrade.py`): refused, it is answered and the
connection closes; accepted, the `101` is written and the tunnel it names takes the connection's bytes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol, TypeVar

import structlog

from gateway.core.http1_request import HeadSeen, RequestError, RequestHead
from gateway.errors import GatewayError
from gateway.http.eager import start_eagerly
from gateway.http.messages import Channel, Request, Response, StreamResponse, error_answer, refusal_answer
from gateway.http.reader import RequestReader
from gateway.http.turns import TURNS
from gateway.http.upgrade import Accepted, Tunnel

if TYPE_CHECKING:
    from gateway.http import HttpServer

log = structlog.get_logger("gateway")
R = TypeVar("R", bound=Request)


class Endpoint(Protocol[R]):
    """What a server serves: it makes its own requests (an application's subclass of `Request`) and
    answers them. The server knows no more of the application than this."""

    def make_request(self, head: RequestHead, body: bytes, channel: Channel) -> R: ...

    def handle(self, request: R) -> Awaitable[Response | StreamResponse]: ...
MAX_PENDING = 256 * 1024  # pipelined bytes held while a request runs before reading pauses
LINGER_S = 5.0  # after refusing a request: how long to read and drop what the client still sends


class ClientGone(ConnectionResetError):
    """The client closed the connection; writing to it is pointless."""


class HttpConnection(asyncio.Protocol):
    __slots__ = ("_drain", "_held", "_lingering", "_pending", "_reader", "_server", "_stall", "_wrote", "closing",
                 "head_since", "idle_since", "request_at", "task", "transport", "tunnel")
    raw_body = False  # a streamed response's body is HTTP-framed (chunked) on this channel

    def __init__(self, server: HttpServer):
        self._server = server
        self._reader = RequestReader(server.limits.max_body_bytes)
        self._pending = bytearray()
        self._drain: asyncio.Future[None] | None = None
        self._stall: asyncio.TimerHandle | None = None  # the send-stall deadline while writing is paused
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.closing = False
        self.idle_since = 0.0
        # the request-head timeout's start: for the first request the accept (a protocol is made at its
        # accept, over TLS before the handshake), so a client that connects and sends nothing is held
        # `head_timeout_s`, not the keep-alive time; for a later one, the arrival of its first byte
        self.head_since = server.loop.time()
        self.request_at = 0.0  # when the last bytes of the request being served came (perf_counter)
        self._wrote = False  # some bytes of the current response are out
        self._lingering = False
        self.tunnel: Tunnel | None = None  # the protocol after an accepted upgrade (http/upgrade.py)
        self._held = False  # the tunnel has bytes still to take: reading waits

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not asyncio's class
        server = self._server
        self.idle_since = server.loop.time()
        if server.closing:
            transport.close()
            return
        # over TLS the connection was counted, and held to the limit, at its accept (http/tls.py)
        if server.tls is None and server.open_count() >= server.limits.max_connections:
            self._refuse_connection()
            return
        server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.tunnel is not None:
            self.tunnel.received(data)
            return
        if self._lingering:
            return
        if self.task is not None or self.closing:
            self._pending += data
            if len(self._pending) > MAX_PENDING and self.transport is not None:
                self.transport.pause_reading()
            return
        if not self._reader.in_request and self.request_at:  # a later request: its head's clock starts now
            self.head_since = self._server.loop.time()
        self._take(data)

    def eof_received(self) -> bool:
        return False  # a client that half-closes has gone: close, which cancels its handler

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._server.connections.discard(self)
        if self.task is not None:
            self.task.cancel()
        tunnel, self.tunnel = self.tunnel, None  # it holds this connection (its link): no cycle left behind
        if tunnel is not None:
            tunnel.lost()
        self._reader.release()
        self._cancel_stall()
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_exception(ClientGone("the client closed the connection"))

    def pause_writing(self) -> None:
        if self._drain is None:
            loop = self._server.loop
            self._drain = loop.create_future()
            self._stall = loop.call_later(self._server.limits.send_timeout_s, self._on_stall)
            if self.tunnel is not None:
                self._apply_reading()  # a peer that reads nothing is not read either (pings, floods)

    def resume_writing(self) -> None:
        self._cancel_stall()
        if self.tunnel is not None:
            self._apply_reading()
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def _cancel_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _on_stall(self) -> None:
        """The client has read nothing of what we wrote for `send_timeout_s`: it holds a response and an
        upstream connection for nothing. Abort (no lingering: its socket is full)."""
        self._stall = None
        self._server.refused("send_stall")
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    # Channel (what responses write to)

    def send(self, data: bytes) -> bool:
        transport = self.transport
        if transport is None or self.closing or transport.is_closing():
            raise ClientGone("the client closed the connection")
        transport.write(data)
        self._wrote = True
        return self._drain is not None

    @property
    def writing_paused(self) -> bool:
        """The client's socket is full: its response waits in `drained`."""
        return self._drain is not None

    async def drained(self) -> None:
        if self._drain is not None:
            await self._drain

    def date(self) -> str:
        return self._server.date()

    # requests

    def _take(self, data: bytes) -> None:
        # the bytes' arrival: a request they complete is "received" now, its parsing and a wait for a
        # turn already on its clock (TTFT, and the gateway's own share of it: docs/overhead.md)
        arrived = time.perf_counter()
        try:
            got = self._reader.feed(data)
        except RequestError as exc:
            self._reject(exc)
            return
        if got is None:
            interim = self._reader.continue_due()
            if interim and self.transport is not None:
                self.transport.write(interim)
            return
        if got[0].wants_websocket:  # docs/reference.md, Routes: only an upgrader's route is switched
            if self._server.upgrader is None:
                self._reject(RequestError(426, "WebSocket mode is not supported: use HTTP streaming"), "upgrade",
                             HeadSeen(got[0].path, got[0].headers))
            else:
                self.task = self._server.loop.create_task(self._upgrade(got[0]))
            return
        self.request_at = arrived
        # Read by the loop with no backlog, its first step runs now, before the next connection is read
        # (a request pipelined behind one that ran is taken inside that task: it starts in a later
        # iteration). Under saturation (units wait for a turn) it starts later too, behind them: new
        # requests going first took the turns from the streams' steps, and delayed their first tokens.
        loop = self._server.loop
        if TURNS.backlog:
            self.task = loop.create_task(self._serve(*got))
            return
        task = start_eagerly(loop, self._serve(*got))
        if task is not None:  # None: answered at once (and a request pipelined behind it started)
            self.task = task

    async def _serve(self, head: RequestHead, body: bytes) -> None:
        endpoint = self._server.endpoint
        request = endpoint.make_request(head, body, self)
        request.t0 = self.request_at
        try:
            loop = self._server.loop
            if TURNS.over(loop):  # a request's first step (parse, authorise, open) waits for a turn
                await TURNS.wait(loop)
            resp = await endpoint.handle(request)
            if isinstance(resp, StreamResponse):
                if not resp.prepared:
                    await resp.prepare(request)
                await resp.write_eof()
                keep = resp.keep_alive
            elif self._wrote:  # a streamed response already began: nothing else may follow on it
                raise RuntimeError("the handler returned a response after it began a streamed one")
            else:
                try:
                    paused = self.send(resp.encode(request))
                finally:  # written or not (the client went): the response's `after` runs once
                    if resp.after is not None:
                        resp.after()
                if paused:
                    await self.drained()  # a client that pipelines and never reads is not answered faster
                keep = request.keeps_alive()
        except (asyncio.CancelledError, ConnectionError):
            self._close()
            return
        except Exception:
            log.exception("unhandled_error", path=head.path)
            self._close()
            return
        self._answered(keep)

    def _answered(self, keep: bool) -> None:
        """The next request, or the close: lingering when the client sent bytes past what is served (a
        pipelining flood cut at MAX_PIPELINED), as a close on them unread resets the connection, and a
        reset can erase answers the client has not read yet."""
        self.task, self._wrote = None, False
        if keep and not self._server.closing:
            self.idle_since = self._server.loop.time()
            self._next()
        elif self._reader.saturated or self._pending:
            self._linger()
        else:
            self._close()

    async def _upgrade(self, head: RequestHead) -> None:
        """Ask the upgrader (it authenticates before any `101`); on a refusal, its answer and the close;
        on acceptance, the `101`, then the tunnel has the connection until its `run` ends."""
        upgrader = self._server.upgrader
        assert upgrader is not None
        try:
            answer = await upgrader.upgrade(head)
            if not isinstance(answer, Accepted):
                if answer.status in _UPGRADE_REFUSALS:  # counted and logged as the server's own refusals are
                    self._server.refused(_UPGRADE_REFUSALS[answer.status])
                if self.send(answer.encode(Request(head, b"", self))):
                    await self.drained()
                return
            tunnel = self.tunnel = answer.tunnel(self)
            self.send(answer.head)
            # the bytes read with the head, then those that came while the upgrade was decided
            data = self._reader.upgraded_bytes + bytes(self._pending)
            self._reader.upgraded_bytes = b""
            self._pending.clear()
            if data:
                tunnel.received(data)
            self._apply_reading()  # reading paused over MAX_PENDING resumes: the tunnel reads now
            if not await tunnel.run():  # else the peer is done sending: the socket closes now (finally)
                self._linger()  # the tunnel's last bytes out with a FIN; what the client still sends is dropped
        except (asyncio.CancelledError, ConnectionError):
            pass
        except Exception:
            log.exception("unhandled_error", path=head.path)
        finally:
            if not self._lingering:
                self._close()

    def hold_reading(self, held: bool) -> None:
        """A tunnel with bytes still to take stops reading until it has taken them (its `Link`)."""
        self._held = held
        self._apply_reading()

    def _apply_reading(self) -> None:
        transport = self.transport
        if transport is None or self.closing or transport.is_closing():
            return
        if self._held or self._drain is not None:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def swept(self, now: float) -> None:
        if self.tunnel is not None:
            self.tunnel.swept(now)

    def _next(self) -> None:
        """The next request, if its bytes came while this one ran (its head's clock starts now)."""
        self.head_since = self._server.loop.time()
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            if self.transport is not None:
                self.transport.resume_reading()
            self._take(data)
        elif self._reader.buffered:
            self._take(b"")
        elif self._reader.saturated:
            self._linger()  # its last queued request was served; what it still sends is dropped

    def _reject(self, exc: RequestError, reason: str | None = None, seen: HeadSeen | None = None) -> None:
        """A request we cannot read: answer its status and close (its framing is not to be trusted),
        lingering (`_linger`): the client may still be sending, a body over the limit."""
        self._server.refused(reason or ("too_large" if exc.status in (413, 414, 431) else "bad_request"))
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(refusal_answer(exc, seen or self._reader.seen(), self._server.refusals, self.date()))
        self._linger()

    def _linger(self) -> None:
        """Close after the last answer without resetting what the client still sends (closing a socket
        with unread bytes resets it, and the client would lose the answer): the answer goes out with a
        FIN, what still comes is read and dropped, and the socket closes when the client does (or after
        LINGER_S): the lingering close of RFC 9112 §9.6. TLS cannot half-close, and its shutdown is that
        lingering close already (`tls.py`): the answer, a close_notify, what still comes read and dropped
        until the client's close_notify or FIN, LINGER_S at most (a WebSocket client answers our close
        frame, then waits for us to end the connection: it is not kept waiting LINGER_S)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.tunnel = None  # a tunnel that ended takes nothing more
        self.closing = self._lingering = True
        transport.resume_reading()  # paused past MAX_PENDING, or by a tunnel: what comes now is dropped
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._server.loop.call_later(LINGER_S, self._close)

    def _close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def close_if_idle(self, idle_before: float) -> None:
        """Shutdown (idle_before = inf) or the keep-alive timeout: close a connection between requests (a
        request begun has deadlines of its own, `check_request_timeouts`, and an answer when they pass)."""
        if self.tunnel is not None and idle_before == math.inf:
            self.tunnel.drain()  # shutdown: the tunnel finishes what runs, then ends
        elif self.task is None and self.idle_since < idle_before \
                and (idle_before == math.inf or not self._reader.in_request):
            self._close()

    def check_request_timeouts(self, head_before: float, whole_before: float) -> None:
        """A request head still incomplete since before `head_before` (a slow-loris client), or a request
        begun before `whole_before` whose body has not all come: 408, answered in the route's shape. A
        connection accepted before `head_before` that has sent nothing: closed (no request to answer)."""
        if self.task is not None or self._lingering:
            return
        reader = self._reader
        if reader.awaiting_head and self.head_since < head_before:
            self._reject(RequestError(408, "the request head took too long"), "head_timeout")
        elif reader.awaiting_body and self.head_since < whole_before:
            self._reject(RequestError(408, "the request body took too long"), "body_timeout")
        elif not self.request_at and not reader.in_request and self.head_since < head_before:
            self._server.refused("head_timeout")
            self._close()

    def _refuse_connection(self) -> None:
        """Over `max_connections`: one 503 and close, before reading anything (the client may retry)."""
        self._server.refused("max_connections")
        transport = self.transport
        if transport is not None:
            err = GatewayError("the gateway is at its connection limit", status=503, code="unavailable",
                               type="api_error")
            transport.write(error_answer(err, self.date(), retry_after=True))
            transport.close()


# an upgrader's refusals that are the server's kind (docs/reference.md, Metrics): no WebSocket on that route;
# the caller holds as many sockets as it may (`server.websocket_max_per_key`)
_UPGRADE_REFUSALS = {426: "upgrade", 429: "websocket_limit"}
