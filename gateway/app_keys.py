"""Typed keys for app state (aiohttp `web.AppKey`) and the request's own slots."""

from __future__ import annotations

from aiohttp import web

from gateway.context import RequestContext
from gateway.metrics import Metrics
from gateway.runtime import Runtime
from gateway.state.base import StateBackend

RUNTIME = web.AppKey("runtime", Runtime)
STATE = web.AppKey("state", StateBackend)
METRICS = web.AppKey("metrics", Metrics)

CTX = web.RequestKey("ctx", RequestContext)  # once the handler has resolved the model
REQUEST_ID = web.RequestKey("request_id", str)
T0 = web.RequestKey("t0", float)
