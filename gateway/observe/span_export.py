"""Finished spans to the collector, off the event loop, and never at the request path's expense.

A bounded queue and one daemon thread, as the OpenTelemetry SDK's BatchSpanProcessor, but every span
that does not reach the collector is counted: `on_end` (the event loop's thread) only appends a
`SpanRecord` to a deque, or drops it when the queue is full; the thread encodes and exports batches
every `schedule_delay_s` (sooner when a batch is full), and a batch the collector does not take (down,
slow or refusing) is dropped whole. So tracing costs the request path filling two records, and a
collector that is down shows as `llm_gateway_trace_spans_dropped_total`.

The export is OTLP/HTTP with a protobuf body (https://opentelemetry.io/docs/specs/otlp/#otlphttp): one
POST per batch on a kept-alive connection (the standard library's http.client), retried with backoff
on the statuses the spec calls retryable and on connection errors, within `export_timeout_s`.
"""

from __future__ import annotations

import collections
import http.client
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence

import structlog

from gateway.observe.otlp import SpanRecord, encode_request

log = structlog.get_logger("gateway")
_RETRYABLE = frozenset({429, 502, 503, 504})  # OTLP/HTTP: "Retryable response codes"
_FIRST_BACKOFF_S = 0.5


class OtlpHttpExporter:
    """POSTs encoded batches to one collector; says whether each was accepted. Logs one warning when
    exports start failing and one line when they recover (the dropped-span counter tells the rate)."""

    def __init__(self, endpoint: str, headers: Mapping[str, str], timeout_s: float,
                 head: tuple[bytes, bytes]) -> None:
        url = urllib.parse.urlsplit(endpoint)
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname or "localhost", url.port
        self._path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        self._headers = {**headers, "Content-Type": "application/x-protobuf"}
        self._timeout, self._head = timeout_s, head
        self._conn: http.client.HTTPConnection | None = None
        self.failing = False

    def export(self, spans: Sequence[SpanRecord]) -> bool:
        return self.send(encode_request(self._head, spans), "trace_export")

    def send(self, body: bytes, what: str) -> bool:
        """POST one encoded export request (spans, or the GenAI metrics: `observe.genai_push`); logs
        `<what>_failing` once when exports start failing and `<what>_recovered` when they recover."""
        ok = self._send(body)
        if ok == self.failing:
            self.failing = not ok
            (log.info if ok else log.warning)(f"{what}_recovered" if ok else f"{what}_failing")
        return ok

    def _send(self, body: bytes) -> bool:
        deadline = time.monotonic() + self._timeout
        backoff = _FIRST_BACKOFF_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                status = self._post(body, remaining)
            except (OSError, http.client.HTTPException):
                self.close()
                status = None
            if status is not None and 200 <= status < 300:
                return True
            if status is not None and status not in _RETRYABLE:
                return False
            if backoff >= deadline - time.monotonic():
                return False
            time.sleep(backoff)
            backoff *= 2

    def _post(self, body: bytes, timeout: float) -> int:
        conn = self._conn
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._conn = cls(self._host, self._port, timeout=timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn.request("POST", self._path, body=body, headers=self._headers)
        response = conn.getresponse()
        response.read()
        if response.will_close:
            self.close()
        return response.status

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class BoundedBatchProcessor:
    def __init__(self, exporter: OtlpHttpExporter, on_dropped: Callable[[int], None], *, max_queue_size: int,
                 max_batch: int, schedule_delay_s: float):
        self._exporter, self._on_dropped = exporter, on_dropped
        self._max_queue, self._max_batch, self._delay = max_queue_size, max_batch, schedule_delay_s
        self._queue: collections.deque[SpanRecord] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # one export at a time: the thread's, or a flush's
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="gateway-span-export", daemon=True)
        self._thread.start()

    def on_end(self, span: SpanRecord) -> None:
        if self._stopping:
            return
        queue = self._queue
        if len(queue) >= self._max_queue:
            self._on_dropped(1)
            return
        queue.append(span)
        if len(queue) == self._max_batch:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._export_all()

    def _export_all(self) -> bool:
        """Export what is queued now; False when some of it was dropped."""
        ok = True
        with self._lock:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(self._max_batch, len(self._queue)))]
                try:
                    sent = self._exporter.export(batch)
                except Exception:  # an exporter bug must not end the thread; the batch is lost, counted
                    sent = False
                if not sent:
                    self._on_dropped(len(batch))
                    ok = False
        return ok

    def force_flush(self) -> bool:
        """Export everything queued, in the caller's thread (tests, shutdown)."""
        return self._export_all()

    def shutdown(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=max(1.0, self._delay))
        self._export_all()
        self._exporter.close()
