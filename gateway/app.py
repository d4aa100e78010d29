"""create_app(config): routes, middleware, app state, the shared ClientSession and the state backend.

The API and /metrics are two applications on two ports: /metrics is never served on the API port.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from gateway.app_keys import METRICS, RUNTIME, STATE
from gateway.config_types import Config
from gateway.handlers import chat_completions, embeddings_handler, healthz, list_models, readyz
from gateway.metrics import Metrics, create_metrics, preinitialise
from gateway.middleware import gateway_middleware
from gateway.runtime import build_runtime
from gateway.state.base import create_backend
from gateway.upstream import Upstream

log = structlog.get_logger("gateway")


def create_app(config: Config, metrics: Metrics | None = None) -> web.Application:
    metrics = metrics or create_metrics()
    app = web.Application(middlewares=[gateway_middleware],
                          client_max_size=config.server.max_body_bytes + 1)
    app[METRICS] = metrics
    preinitialise(metrics, config)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        upstream = Upstream()
        state = create_backend(config.state, config.cache,
                               on_degraded=lambda reason: metrics.state_degraded.inc())
        app[STATE] = state
        app[RUNTIME] = build_runtime(config, upstream, metrics)
        yield
        upstream.close()
        await state.close()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/embeddings", embeddings_handler)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    _add_optional_routes(app)
    return app


def _add_optional_routes(app: web.Application) -> None:
    """APIs that live in their own modules register here when present."""
    try:
        from gateway.responses_handler import responses
    except ImportError:
        return
    app.router.add_post("/v1/responses", responses)


def reload(app: web.Application, config: Config) -> None:
    """SIGHUP: swap in a runtime compiled from the new config; requests in flight keep the old one."""
    old = app[RUNTIME]
    app[RUNTIME] = build_runtime(config, old.upstream, old.metrics, previous=old)
    preinitialise(old.metrics, config)


def create_metrics_app(metrics: Metrics) -> web.Application:
    async def serve_metrics(request: web.Request) -> web.Response:
        registry = metrics.registry
        if registry is None:  # multiprocess mode: aggregate every worker's files
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", serve_metrics)
    return app
