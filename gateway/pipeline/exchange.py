"""The gateway's request: the HTTP server's `Request` (head, body, the connection) with what the pipeline
keeps on it, typed. The app builds it (`App.make_request`, the server's `Endpoint`), so the server knows
no app, and the pipeline reads the app only through `Host`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from gateway.core.api import ClientApi
from gateway.core.body_scan import Scan
from gateway.core.http1_request import RequestHead
from gateway.http import Request, Response, StreamResponse
from gateway.http.messages import Channel
from gateway.observe.context import Admission, RequestContext
from gateway.observe.record import RequestRecorder
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.socket_slots import SocketSlots
from gateway.state.base import StateBackend


class ConnectionPoints(Protocol):
    """The process-level points a WebSocket connection (or an upgrade refused) writes (`observe.metrics.Metrics`
    has them): the pipeline and the APIs reach the metrics object only through these and the request's recorder."""

    def websocket_opened(self) -> None: ...

    def websocket_closed(self) -> None: ...

    def websocket_refused(self, reason: str) -> None: ...  # an upgrade refused before the `101`


class Host(Protocol):
    """What the pipeline reads of the app that serves it (`gateway.app.App`)."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def state(self) -> StateBackend: ...

    @property
    def routes(self) -> Mapping[str, Mapping[str, Handler]]: ...

    @property
    def apis(self) -> Mapping[str, ClientApi]: ...  # by route

    @property
    def metrics(self) -> ConnectionPoints: ...

    @property
    def sockets(self) -> SocketSlots: ...  # open WebSocket-mode connections per caller

    def recorder(self, request: GatewayRequest, api: ClientApi, request_id: str) -> RequestRecorder:
        """The request's recorder (`observe.record`), its trace started (a no-op when tracing is off)."""
        ...


class GatewayRequest(Request):
    __slots__ = ("admission", "app", "body_size", "ctx", "parsed", "rec", "scan", "transport")

    def __init__(self, app: Host, head: RequestHead, body: bytes, channel: Channel):
        super().__init__(head, body, channel)
        self.app = app
        self.ctx: RequestContext | None = None  # once the handler has resolved the model
        self.admission: Admission | None = None  # who asked for which model, known before the model resolves
        self.rec: RequestRecorder | None = None  # the per-request recorder, on API routes
        self.transport = "http"  # or "websocket": a response.create of WebSocket mode (the log line says)
        # the body as its transport parsed it already (WebSocket mode), `body` its JSON: `read_json` takes
        # it instead of parsing `body` again, under the same bounds (docs/reference.md, WebSocket mode)
        self.parsed: dict[str, Any] | None = None
        self.scan: Scan | None = None  # and what its transport found walking it, a part at a time
        self.body_size = len(body)  # the body's bytes as HTTP carried them (WebSocket mode: `parsed`'s, counted)

    @property
    def recorder(self) -> RequestRecorder:
        """The recorder of an API route's request (the middleware makes it before the handler runs)."""
        assert self.rec is not None
        return self.rec


Handler = Callable[[GatewayRequest], Awaitable[Response | StreamResponse]]
