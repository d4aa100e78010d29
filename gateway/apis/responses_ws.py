"""`GET /v1/responses` + `Upgrade: websocket`: the Responses API's WebSocket mode (docs/reference.md,
WebSocket mode; docs/agents.md, Codex). A new transport, not a new pipeline: each `response.create` is
served as a `POST /v1/responses` with `stream: true` through the one middleware and serve path (retries,
fallback, continuation, redaction, guardrails, usage, cost, one log line with `transport: "websocket"`),
on a channel that takes the stream's SSE bytes and sends each event's JSON as one text message.

The key is checked before the `101` and again by each response (a key revoked or expired since: an
`error` event, then close 1008). One response at a time: a `response.create` while one runs gets an
`error` event with code `response_in_progress`, as OpenAI answers it; one that comes after the running
response's terminal event went out, while its accounting ends, waits for it and is served next.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import structlog

from gateway.apis.catalog import RESPONSES
from gateway.apis.responses_ws_channel import EventChannel
from gateway.apis.responses_ws_refusals import auth_reason, oversized, refused_message, refused_upgrade, warmup_caller
from gateway.config.types import ApiKey
from gateway.core.body_scan import NOTHING, Scan, body_scans, walked
from gateway.core.http1_request import RequestHead
from gateway.core.json_body import DEPTH_MESSAGE, BodyError
from gateway.core.json_split import SplitParse
from gateway.core.responses.filter import EVENT_ENCODER
from gateway.core.responses.socket import (
    Conversation,
    Create,
    EventCutter,
    SocketMessageError,
    error_event,
    error_from_body,
    read_message,
    read_split,
    split_error,
    warmup_events,
)
from gateway.core.websocket import GOING_AWAY, NORMAL, POLICY_VIOLATION, HandshakeError, ServerSocket, accept_head
from gateway.errors import GatewayError, InvalidRequest
from gateway.http import Accepted, Link, Response, StreamResponse
from gateway.http.eager import start_eagerly
from gateway.http.turns import TURNS
from gateway.pipeline.cors import origin_allowed
from gateway.pipeline.exchange import GatewayRequest, Host
from gateway.pipeline.limits import within_budgets
from gateway.pipeline.middleware import handle
from gateway.pipeline.socket_slots import Slot
from gateway.providers.base import MARKER
from gateway.providers.convert.responses_chat_request import INPUT_MEMO, InputMemo
from gateway.upstream import STEP_BYTES

log = structlog.get_logger("gateway")
# fields of the upgrade request a response's own request does not carry
_HOP_FIELDS = frozenset(("upgrade", "connection", "content-length", "transfer-encoding", "expect", "x-request-id",
                         "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                         "sec-websocket-protocol"))
# messages taken per loop iteration: a flood of small messages read in one go is taken a batch at a time
# (reading held meanwhile), so other connections are served between the batches (~15 us a message)
BATCH = 32


async def upgrade(app: Host, head: RequestHead) -> Response | Accepted:
    """Answer an upgrade request: 426 on any route but `GET /v1/responses`, 400 for a bad handshake,
    the key's refusal (401) before any `101` (each with the client's `x-request-id` when it sent a safe
    one); else the `101` and the connection's session."""
    if head.path != RESPONSES.path or head.method != "GET":
        err = GatewayError("WebSocket mode is served on GET /v1/responses only", status=426,
                           code="upgrade_required", type="invalid_request_error")
        return refused_upgrade(app, err, head, "upgrade_required", logged=True)  # the server logs its 426
    origin = head.headers.get("origin")
    if origin is not None and not origin_allowed(app.runtime.config.server.cors, origin):
        # a browser opens a socket to any site with no preflight: a page may use the gateway only when
        # its origin is allowed (server.cors.allow_origins), else an unauthenticated gateway is anyone's
        err = GatewayError("this Origin may not open a WebSocket (server.cors.allow_origins)", status=403,
                           code="permission_denied", type="invalid_request_error")
        return refused_upgrade(app, err, head, "origin")
    try:
        if head.http10:
            raise HandshakeError("a WebSocket handshake is an HTTP/1.1 request")
        answer = accept_head(head.headers)
        key = await app.runtime.keyring.caller(head.headers)  # a key, or an IdP token (one JWKS refetch)
        # taken here, the socket made with no await between: each holds a conversation, so a key's are bounded
        slot = app.sockets.take(key, app.runtime.config.server.websocket_max_per_key)
    except HandshakeError as exc:
        return refused_upgrade(app, InvalidRequest(str(exc)), head, "handshake")
    except GatewayError as err:  # TooManySockets (429) is logged by the server too (`http_refused`)
        return refused_upgrade(app, err, head, auth_reason(err), logged=err.status == 429)
    return Accepted(answer, lambda link: ResponsesSocket(app, head, link, key, slot))


class ResponsesSocket:
    """One WebSocket-mode connection (the server's `Tunnel`)."""

    __slots__ = ("_active", "_busy_frame", "_caller", "_close_code", "_conversation", "_cutter", "_done",
                 "_draining", "_headers", "_held", "_key", "_loop", "_memo", "_next", "_opened", "_responses",
                 "_resuming", "_running", "_slot", "_warmups", "app", "frames", "idle_s", "link")

    def __init__(self, app: Host, head: RequestHead, link: Link, key: ApiKey | None, slot: Slot):
        self.app, self.link = app, link
        self._slot: Slot | None = slot  # its place in its caller's count, given back once (`_give_back`)
        server = app.runtime.config.server
        self.frames = ServerSocket(server.max_body_bytes)
        self.idle_s = server.websocket_idle_s
        self._headers = {k: v for k, v in head.headers.items() if k not in _HOP_FIELDS}
        self._headers["content-type"] = "application/json"
        self._conversation = Conversation()
        self._memo = InputMemo()  # its input's translation to chat messages (the bridges'), kept between turns
        self._running: asyncio.Task[None] | None = None
        self._cutter: EventCutter | None = None  # the running response's events, as they went out
        self._next: str | bytes | None = None  # a message sent after the running response's end (`_take`)
        self._resuming: asyncio.Task[None] | None = None  # the next batch, waiting for the peer to read
        # looked up once: CPython 3.11's `get_running_loop` makes a `getpid` call each time (bench/README.md)
        self._loop = asyncio.get_running_loop()
        self._done: asyncio.Future[None] = self._loop.create_future()
        self._draining = False
        self._active = self._loop.time()
        self._held = False  # messages wait in the frame parser (see BATCH): reading is held
        self._caller = key  # as the upgrade found it: whose messages a refusal's line names
        self._key = key.name if key is not None else None  # for the connection's log lines
        self._opened = self._loop.time()
        self._responses = self._warmups = 0
        self._close_code: int | None = None
        self._busy_frame = b""  # the `response_in_progress` event's frame, made once
        app.metrics.websocket_opened()
        log.info("websocket_opened", key=self._key, path=RESPONSES.path)

    async def run(self) -> bool:
        """Until the connection ends; True when the client closed it (its close frame answered: RFC 6455
        §7.1.1, the server then closes the TCP connection at once), False when we did."""
        try:
            await self._done
            return self.frames.closed_by_peer
        except asyncio.CancelledError:
            if self._draining:  # `server.drain_s` ran out with a response running (the cancel took `_done` too)
                self._cut_by_drain()
            raise
        finally:
            self._give_back()
            if self._resuming is not None:
                self._resuming.cancel()
            try:
                await self._cut()
            finally:
                log.info("websocket_closed", key=self._key, responses=self._responses, warmups=self._warmups,
                         continued=self._conversation.continued, close_code=self._close_code,
                         duration_ms=round((self._loop.time() - self._opened) * 1000, 2))
                self.frames.release()
                self._conversation.forget()  # freed now, not when the connection's objects are

    async def _cut(self) -> None:
        """The response still running when the connection ends is cut (the client went: its upstream
        request is closed too) and has ended, its `request` line written, before the connection's last
        line: `websocket_opened` and `websocket_closed` frame its responses' lines (docs/reference.md)."""
        running = self._running
        if running is not None:
            running.cancel()
            await asyncio.wait((running,))

    def received(self, data: bytes) -> None:
        if self._done.done():
            return
        fed = self.frames.feed(data, BATCH)
        if fed.more != self._held:
            self._held = fed.more
            self.link.hold_reading(fed.more)
        slow = self._write(fed.reply) if fed.reply else False
        if fed.close is not None:
            self._close_code = fed.close
            if oversized(fed.close, self.frames):  # its close (1009) says so: no event
                self._refuse(None, "", 413, "request_too_large")
            self._end()
            return
        slow = self._take(fed.texts) or slow
        if not fed.more:
            return
        if slow:  # the peer reads less than it sends: its next messages wait until it has read ours
            self._resuming = self._loop.create_task(self._after_drain())
        else:
            self._loop.call_soon(self.received, b"")

    def _take(self, texts: list[str | bytes]) -> bool:
        """Start a response, or answer `response_in_progress`: the answers of one batch go out in one write
        (one syscall, not one per message). True when the peer is slow (its socket buffer is full)."""
        slow, busy = False, 0
        for text in texts:
            self._active = self._loop.time()
            if self._running is not None or self._draining:
                if self._next is None and not self._draining and self._answered():
                    self._next = text  # its predecessor's end went out: served once its accounting ends
                else:
                    busy += 1
                continue
            if busy:
                slow = self._write(self._busy() * busy) or slow
                busy = 0
            # its first step (parse, authorise, open the upstream) runs now, as an HTTP request's does
            self._running = start_eagerly(self._loop, self._respond(text))
        if busy:
            slow = self._write(self._busy() * busy) or slow
        return slow

    async def _after_drain(self) -> None:
        """The next batch once the peer has read what we wrote (a peer that never reads is cut by the
        server's send-stall bound, `server.send_timeout_s`)."""
        try:
            await self.link.drained()
        except ConnectionError:
            self._end()
            return
        self._resuming = None
        self.received(b"")

    def _answered(self) -> bool:
        """The running response's terminal event has gone out: a client may send its next at once (Codex
        does), while the response's task still settles its accounts (`pipeline.middleware._finish`)."""
        cut = self._cutter
        return cut is not None and (cut.ended is not None or cut.failed)

    def _busy(self) -> bytes:
        if not self._busy_frame:
            self._busy_frame = self.frames.text(error_event(
                "response_in_progress", "a response is in progress on this connection: wait for its end",
                None, 409))
        return self._busy_frame

    def swept(self, now: float) -> None:
        if self._running is None and now - self._active > self.idle_s:
            self.close(NORMAL, "idle timeout")

    def drain(self) -> None:
        self._draining = True
        if self._running is None:
            self.close(GOING_AWAY, "the gateway is shutting down")

    def lost(self) -> None:
        self._end()
        self._give_back()  # `run` may never have started (the `101` could not be written)

    def _give_back(self) -> None:
        """Once: the caller's slot, and the open-connections gauge."""
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()
            self.app.metrics.websocket_closed()

    def _cut_by_drain(self) -> None:
        """The response in flight did not end within the drain: the client is told so (an `error` event,
        the response having no terminal one) and the close is 1001 as for an idle connection at shutdown
        (docs/reference.md, WebSocket mode), not a bare TCP close it would read as a network failure."""
        self._write(self.frames.text(error_event(
            "unavailable", "the gateway is shutting down: the response was cut after server.drain_s", None, 503)))
        self.close(GOING_AWAY, "the gateway is shutting down")

    def close(self, code: int, reason: str) -> None:
        self._close_code = code
        self._write(self.frames.close(code, reason))
        self._end()

    def _write(self, data: bytes) -> bool:
        """Write to the peer; True when it is slow (its socket buffer is full)."""
        if data and not self.link.closing:
            try:
                return self.link.send(data)
            except ConnectionError:
                self._end()
        return False

    def _end(self) -> None:
        if not self._done.done():
            self._done.set_result(None)

    async def _respond(self, text: str | bytes) -> None:
        try:
            await self._serve(text)
        except (ConnectionError, asyncio.CancelledError):
            self._end()
            return
        except Exception:
            log.exception("unhandled_error", path="websocket /v1/responses")
            self.close(1011, "internal error")
            return
        finally:
            self._running, self._cutter, waiting, self._next = None, None, self._next, None
            self._active = self._loop.time()
            if waiting is not None and not self._done.done() and not self._draining:
                self._running = start_eagerly(self._loop, self._respond(waiting))
        if self._draining:
            self.close(GOING_AWAY, "the gateway is shutting down")

    async def _serve(self, text: str | bytes) -> None:
        try:
            create = read_message(text) if isinstance(text, str) else await self._read_big(text)
            own, given = body_scans(create.body, MARKER)  # walked before the kept conversation joins them
            whole, scan = self._conversation.expand(create.body, own, given)
        except SocketMessageError as exc:
            self._refuse(exc.param, str(exc), 400, "invalid_request")
            return
        if not create.generate:  # kept as a response is, so sized as one (see `_sized`)
            if self._sized(create.body) is not None:
                await self._warm_up(create.body, whole, scan)
            return
        loop = self._loop
        if TURNS.over(loop):  # under saturation a first step waits for a turn, as an HTTP request's does
            await TURNS.wait(loop)
        size = self._sized(create.body)
        if size is None:
            return
        if size > STEP_BYTES:  # counting it was this step's work (~1 ms a MiB): the pipeline's is the next's
            await asyncio.sleep(0)
        channel = EventChannel(self.link)
        self._cutter = channel.cutter
        EVENT_ENCODER.set(channel.cutter.frame)  # this task's (the response's) events, framed as made
        INPUT_MEMO.set(self._memo)  # and its conversation's translation, extended by its new items only
        request = self._request(size, channel)
        request.parsed = create.body  # parsed once, from the message, and never written out whole here
        request.scan = scan  # and walked in the parts it came in, not again as a whole every turn
        self._responses += 1
        resp = await handle(request)
        if isinstance(resp, StreamResponse):
            await resp.prepare(request)
            await resp.write_eof()
        else:
            self._refused(resp)
            return
        ended = channel.cutter.ended
        if ended is not None and not channel.cutter.failed:
            output = walked(ended.output, 1, MARKER)  # as the next turn's body holds it, in `input`
            self._conversation.keep(ended.response_id, whole, ended.output, output)

    async def _read_big(self, raw: bytes) -> Create:
        """A big message (given as bytes, `core.websocket.STEPPED_BYTES`) parsed in steps between the
        loop's other work, as an HTTP body over `pipeline.request.SPLIT_BYTES` is (`core.json_split`):
        orjson parsed 10 MiB of one string in one call of 15-50 ms."""
        split = SplitParse(raw)
        try:
            await self.app.runtime.slicer.run(split)
        except BodyError as exc:
            raise split_error(exc) from None
        return read_split(split, raw)

    async def _warm_up(self, body: dict[str, Any], whole: list[Any], scan: Scan) -> None:
        """`generate: false` (Codex's warm-up): answered as OpenAI does, with no model call."""
        self._warmups += 1
        try:
            key = await warmup_caller(self.app, self._headers, body, scan)
            await within_budgets(self.app.runtime, self.app.state, key)  # spends nothing: not counted
        except GatewayError as err:
            self._refused_with(err.status, error_event(err.code, err.message, err.param, err.status, err.headers,
                                                       err.type))
            return
        rid, events = warmup_events(body)
        self._write(b"".join(self.frames.text(e) for e in events))
        self._conversation.keep(rid, whole, [], NOTHING)

    def _sized(self, body: dict[str, Any]) -> int | None:
        """The body's size as HTTP carries it (`Conversation.body_size`), or None (an error event sent)."""
        try:
            size = self._conversation.body_size(body)
        except orjson.JSONEncodeError:  # nested past the 254 levels orjson writes, so past MAX_DEPTH too
            self._refuse(None, DEPTH_MESSAGE, 400, "invalid_request")
            return None
        if size > self.frames.max_message:  # the whole conversation, as HTTP would have carried it
            self._refuse("previous_response_id", f"the conversation is larger than {self.frames.max_message} "
                         "bytes: start a new one without previous_response_id", 413, "request_too_large")
            return None
        return size

    def _request(self, size: int, channel: EventChannel) -> GatewayRequest:
        head = RequestHead("POST", RESPONSES.path, "", self._headers, True, False, size, False, None)
        request = GatewayRequest(self.app, head, b"", channel)  # its body is `parsed`, its size `size`
        request.transport, request.body_size = "websocket", size
        return request

    def _refuse(self, param: str | None, message: str, status: int, code: str) -> None:
        """A message refused before it became a response: its `error` event (none with `message` empty),
        and its `request` line and count (`responses_ws_refusals.refused_message`)."""
        if message:
            self._write(self.frames.text(error_event(code, message, param, status)))
        refused_message(self.app, self.link, self._headers, self._caller, status, code)

    def _refused(self, resp: Response) -> None:
        """A response refused before its stream (the status and error body HTTP would have carried); then
        what the response leaves for after its write (the request's log line), as the HTTP server does."""
        self._refused_with(resp.status, error_from_body(resp.status, resp.body, resp.headers))
        if resp.after is not None:
            resp.after()

    def _refused_with(self, status: int, event: str) -> None:
        self._write(self.frames.text(event))
        if status == 401:  # the key was revoked or expired since the upgrade
            self.close(POLICY_VIOLATION, "the key is no longer valid")
