"""The W3C trace headers (`traceparent`, `tracestate`) an upstream request of the current attempt carries.

Set by the tracing recorder (`observe.tracing`) around one attempt, in that attempt's task, and read by
`gateway.upstream` when it writes the request (here, in the pure core both import, so the I/O layer
imports no telemetry): the upstream sees the attempt's span as its parent
(https://www.w3.org/TR/trace-context/). Empty when tracing is off, so the request path reads one context
variable and adds nothing. Holds no OpenTelemetry object, so the I/O layer imports no SDK.
"""

from __future__ import annotations

from contextvars import ContextVar

TRACE_HEADERS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("gateway_trace_headers", default=())
