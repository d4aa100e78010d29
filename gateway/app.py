"""The API application (routes, shared state, start and stop) and the metrics application.

The API and /metrics are two servers on two ports: /metrics is never served on the API port. The API
runs on the gateway's own HTTP/1.1 server (`gateway.http`); /metrics, a scrape every few seconds,
on aiohttp.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from gateway.apis.admin import PREFIX as ADMIN_PREFIX
from gateway.apis.admin import admin
from gateway.apis.catalog import CHAT, CLIENT_APIS, COUNT_TOKENS, EMBEDDINGS, MESSAGES, RESPONSES
from gateway.apis.chat import chat_completions
from gateway.apis.console import ROUTES as CONSOLE_ROUTES
from gateway.apis.embeddings import embeddings_handler
from gateway.apis.messages import messages
from gateway.apis.messages_tokens import count_tokens
from gateway.apis.models import healthz, list_models, readyz, retrieve_model
from gateway.apis.responses import responses
from gateway.apis.responses_ws import upgrade
from gateway.apis.spend import key_spend
from gateway.config import ConfigError
from gateway.config.extras import missing_extras
from gateway.config.restart import restart_keys
from gateway.config.types import DEFAULT_MAX_CONNECTIONS, Config, ServerConfig, TlsConfig
from gateway.core.api import ClientApi
from gateway.core.http1_request import HeadSeen, RequestHead
from gateway.errors import GatewayError, StartupError
from gateway.http import Accepted, HttpServer, ServerLimits
from gateway.http.messages import Channel, Response, StreamResponse
from gateway.observe.metrics import Metrics, create_metrics, exposition, preinitialise
from gateway.observe.record import RequestRecorder
from gateway.observe.recorder import NO_TRACE
from gateway.pipeline.budget_sync import BudgetSync
from gateway.pipeline.exchange import GatewayRequest, Handler
from gateway.pipeline.jwt_auth import keep_keys_fresh
from gateway.pipeline.middleware import handle, refused_response
from gateway.pipeline.runtime import Runtime, build_runtime
from gateway.pipeline.socket_slots import SocketSlots
from gateway.providers.registry import auth_of, in_process
from gateway.state.base import StateBackend, create_backend
from gateway.store import ControlPlane, StoreError, StoreHooks
from gateway.upstream import Upstream
from gateway.upstream.signing import close_signers, start_signers

if TYPE_CHECKING:
    from gateway.observe.genai_push import GenAiPush
    from gateway.observe.tracing import Tracing

log = structlog.get_logger("gateway")
BUDGET_REFRESH_MIN_S = 1.0  # memory state: the other processes' spend read from the ledger at most this often


class App:
    """What every request shares: the compiled runtime (swapped whole on reload), the state backend and
    the metrics. `start` opens the upstream pool and the state backend; `close` releases them."""

    def __init__(self, config: Config, metrics: Metrics | None = None):
        self.config = config
        self.metrics = metrics or create_metrics()
        preinitialise(self.metrics, config, CLIENT_APIS)
        self.upstream = Upstream(config.egress, in_process)
        self.control = _control_plane(config, self.metrics)
        self.runtime: Runtime = build_runtime(config, self.upstream, control=self.control)
        self._state: StateBackend | None = None
        self._budgets: BudgetSync | None = None
        self.routes: Mapping[str, Mapping[str, Handler]] = _routes()
        self.apis: Mapping[str, ClientApi] = {api.path: api for api in CLIENT_APIS}  # by route
        self.sockets = SocketSlots()  # WebSocket-mode connections per caller: kept across reloads
        # read at start only (docs/extensions.md, "Traces"): a reload keeps the process's tracer
        self.tracing: Tracing | None = _start_tracing(config, self.metrics)
        self.genai_push: GenAiPush | None = None  # the GenAI metrics by OTLP, read at start only too
        self._jwks_refresh: asyncio.Task[None] | None = None  # `auth.jwt.refresh_s`, through reloads
        # TLS on the listener: a reload swaps in a new context, so new handshakes present the new
        # certificate and open connections keep theirs
        self.tls: ssl.SSLContext | None = None
        self._closing: set[asyncio.Future[None]] = set()  # signers a reload replaced, closing
        if config.server.tls is not None:
            self.tls = tls_context(config.server.tls)

    def make_request(self, head: RequestHead, body: bytes, channel: Channel) -> GatewayRequest:
        """The server's `Endpoint`: every request carries this app (the pipeline's `Host`)."""
        return GatewayRequest(self, head, body, channel)

    def handle(self, request: GatewayRequest) -> Awaitable[Response | StreamResponse]:
        return handle(request)  # the middleware's own coroutine: every await resumes one frame fewer

    def refusal(self, err: GatewayError, seen: HeadSeen) -> Response:
        """The server's `Refusals`: what it refused before routing (413, 431, 408...) answered in the
        route's error shape with the client's request id (docs/messages.md, Errors) and CORS fields."""
        return refused_response(self.apis, err, seen.path, seen.headers, self.runtime.config.server.cors)

    def upgrade(self, head: RequestHead) -> Awaitable[Response | Accepted]:
        """The server's `Upgrader`: WebSocket mode on `GET /v1/responses` (apis/responses_ws.py)."""
        return upgrade(self, head)

    def recorder(self, request: GatewayRequest, api: ClientApi, request_id: str) -> RequestRecorder:
        """The request's recorder, with its trace: the shared no-op one when tracing is off."""
        trace = NO_TRACE if self.tracing is None else self.tracing.start(request.headers, api, request.path,
                                                                         self.runtime.config.providers)
        return RequestRecorder(self.metrics, api.name, request_id, request.t0, trace, request.transport)

    async def start(self) -> None:
        self.upstream.signers = await start_signers(self.config.providers, auth_of, self.upstream.minted)
        metrics = self.metrics
        self._state = create_backend(self.config.state, self.config.cache,
                                    on_degraded=lambda reason: metrics.state_degraded_op(),
                                    on_mode=metrics.state_mode)
        await self._state.warm()  # bounded: connected before the first burst (docs/scale-out.md)
        if self.control is not None:
            try:
                await self.control.start()
            except StoreError as exc:  # start needs the schema; later outages are served from cache
                raise StartupError(f"store.url: cannot open the store: {exc}") from None
            _reserve_keys(self.control, self.config)  # raises ConfigError: exit 2 (docs/reference.md, "Commands")
            await self._start_budgets(self.control, self._state)
        if (jwt := self.runtime.keyring.jwt) is not None:  # the IdP's keys before the first token arrives
            await jwt.jwks.refresh(jwt.cfg.timeout_s)  # bounded; a failure leaves a refetch to come
        self._jwks_refresh = asyncio.get_running_loop().create_task(
            keep_keys_fresh(lambda: self.runtime.keyring.jwt), name="jwks-refresh")
        if self.config.telemetry.metrics_endpoint is not None:  # OTEL_METRICS_EXPORTER=otlp
            from gateway.observe.genai_push import start_push

            self.genai_push = start_push(self.config.telemetry, self.metrics)

    async def _start_budgets(self, control: ControlPlane, state: StateBackend) -> None:
        """Budgets start from the ledger's spend for the period, before the first request (bounded)."""
        store = self.config.store
        self._budgets = BudgetSync(control.store, state, max(store.poll_s, BUDGET_REFRESH_MIN_S),
                                   store.connect_timeout_s)
        await self._budgets.load()
        self._budgets.start()

    async def close(self) -> None:
        if self._jwks_refresh is not None:
            self._jwks_refresh.cancel()
            await asyncio.gather(self._jwks_refresh, return_exceptions=True)
        self.upstream.close()
        await close_signers(self.upstream.signers)
        if self.tracing is not None:  # the last export may wait on the collector: not on the loop
            await asyncio.to_thread(self.tracing.shutdown)
        if self.genai_push is not None:
            await self.genai_push.close()
        if self._budgets is not None:
            await self._budgets.close()
        if self._state is not None:
            await self._state.close()
        if self.control is not None:
            await self.control.close()

    @property
    def state(self) -> StateBackend:
        if self._state is None:
            raise RuntimeError("the app has not started")
        return self._state

    def prepare_reload(self, config: Config) -> Reload:
        """SIGHUP, the slow half, safe off the loop (`asyncio.to_thread`): compile the new config and load
        its certificate into a new context; nothing in use is touched. Raises ValueError (nothing
        changed) when the config cannot be compiled or the certificate cannot be loaded, ConfigError when
        a key clashes with a stored one."""
        tls = config.server.tls
        if (tls is None) != (self.tls is None):
            raise ValueError("server.tls: turning TLS on or off needs a restart")
        context = tls_context(tls) if tls is not None else None
        missing = missing_extras(config.providers.values())
        if missing is not None:
            raise ValueError(missing)
        old = self.runtime
        if old.control is not None:
            _no_clash(old.control, config)  # the old config stays: reload_rejected
        runtime = build_runtime(config, old.upstream, previous=old)
        preinitialise(self.metrics, config, CLIENT_APIS)
        return Reload(runtime, context, tuple(restart_keys(self.config, config)))

    async def apply_reload(self, reload: Reload) -> None:
        """The swap, on the loop: requests in flight keep the runtime they started with. The new config's
        request signers start first (their first credentials, bounded: docs/cloud-providers.md), so it
        takes over with them: a provider it adds is never called unsigned, and two reloads one after the
        other (the caller serialises them) never leave the first one's signers beside the second's
        runtime. The runtime and the signers are then swapped with no await between; the old signers close
        after (their credentials stay masked for a request of the old config still answering)."""
        signers = await start_signers(reload.runtime.config.providers, auth_of, self.upstream.minted)
        old = self.upstream.signers
        self.runtime = reload.runtime
        self.upstream.signers = signers
        if reload.runtime.control is not None:  # a stored key that clashed since `prepare_reload` is left out
            reload.runtime.control.cache.reserve(reload.runtime.config.auth.keys)
        if reload.tls is not None:
            self.tls = reload.tls
        if old:
            closing = asyncio.ensure_future(close_signers(old))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def reload(self, config: Config) -> None:
        await self.apply_reload(self.prepare_reload(config))


@dataclass(frozen=True, slots=True)
class Reload:
    runtime: Runtime
    tls: ssl.SSLContext | None
    needs_restart: tuple[str, ...] = ()  # changed keys read at start only (`config.restart`)


def _control_plane(config: Config, metrics: Metrics) -> ControlPlane | None:
    """The store's client side, when `store.url` is set (started by `App.start`)."""
    if config.store.url is None:
        return None
    return ControlPlane(config.store, StoreHooks(health=metrics.store_health, error=metrics.store_error,
                                                  pending=metrics.ledger_pending_rows,
                                                  shadowed=metrics.stored_keys_shadowed))


def _no_clash(control: ControlPlane, config: Config) -> None:
    """A config key and a stored key with one name or one secret are a config error (docs/keys-teams-spend.md,
    "Config keys and stored keys"): they would count under two counters behind one name. Raises ConfigError."""
    clashes = control.cache.clashes(config.auth.keys)
    if clashes:
        raise ConfigError([c.line() for c in clashes])


def _reserve_keys(control: ControlPlane, config: Config) -> None:
    """At start, once the store's keys are loaded: refuse a clash, then let the config's keys win any
    that a store sync brings later (written by a replica with another config)."""
    _no_clash(control, config)
    control.cache.reserve(config.auth.keys)


def _start_tracing(config: Config, metrics: Metrics) -> Tracing | None:
    """The process's tracer, when `telemetry` configures one. The SDK (and its exporter's HTTP client,
    ~4.5 MiB resident) is imported only then."""
    if not config.telemetry.enabled:
        return None
    from gateway.observe.tracing import Tracing

    return Tracing(config.telemetry, metrics.span_dropped)
class _KeyEncrypted(Exception):
    """Raised by the password callback when the key is encrypted and no passphrase is configured."""


def _no_password() -> bytes:
    # OpenSSL would otherwise prompt on the terminal, and the process would wait there for ever (#27)
    raise _KeyEncrypted


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server context holding the configured certificate. Raises ValueError naming the files, never
    the key's content or its passphrase."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    where = f"server.tls: cannot load {tls.cert_file} / {tls.key_file}"
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password or _no_password)
    except _KeyEncrypted:
        raise ValueError(f"{where}: the key is encrypted and server.tls.key_password is not set") from None
    except OSError as exc:  # ssl.SSLError included
        reason = exc.strerror or getattr(exc, "reason", None) or type(exc).__name__
        hint = " (a wrong server.tls.key_password?)" if tls.key_password and isinstance(exc, ssl.SSLError) else ""
        raise ValueError(f"{where}: {reason}{hint}") from None
    return context


def _routes() -> dict[str, dict[str, Handler]]:
    return {
        CHAT.path: {"POST": chat_completions},
        RESPONSES.path: {"POST": responses},
        EMBEDDINGS.path: {"POST": embeddings_handler},
        MESSAGES.path: {"POST": messages},
        COUNT_TOKENS.path: {"POST": count_tokens},
        "/v1/models": {"GET": list_models},
        "/v1/gateway/spend": {"GET": key_spend},
        "/v1/models/{id}": {"GET": retrieve_model},
        "/healthz": {"GET": healthz},
        "/readyz": {"GET": readyz},
        ADMIN_PREFIX: {"*": admin},  # every method of every path under it
        **CONSOLE_ROUTES,  # the admin console's page and files (docs/console.md)
    }


class _RefusalCounter:
    """What the HTTP server refuses before a handler runs, counted by reason (a fixed set)."""

    def __init__(self, metrics: Metrics):
        self._metrics = metrics

    def refused(self, reason: str) -> None:
        self._metrics.refused(reason)


def server_limits(s: ServerConfig, max_connections: int | None = None) -> ServerLimits:
    cap = max_connections or s.max_connections or DEFAULT_MAX_CONNECTIONS
    return ServerLimits(max_body_bytes=s.max_body_bytes, max_connections=cap,
                        head_timeout_s=s.request_head_timeout_s, send_timeout_s=s.send_timeout_s,
                        turn_s=s.loop_turn_ms / 1000)


async def serve_api(app: App, host: str, port: int, *, reuse_port: bool = False,
                    max_connections: int | None = None) -> HttpServer:
    """Start the app and its server; returns the listening server (`server.shutdown` drains).
    `max_connections` caps the configured limit (what the process's file descriptors allow)."""
    await app.start()
    server = HttpServer(app, server_limits(app.config.server, max_connections), events=_RefusalCounter(app.metrics),
                        upgrader=app, refusals=app)
    await server.listen(host, port, reuse_port=reuse_port, tls=app.tls)
    return server


def create_metrics_app(metrics: Metrics) -> web.Application:
    async def serve_metrics(request: web.Request) -> web.Response:
        body, content_type = exposition(metrics)
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", serve_metrics)
    return app
