"""Finished spans to the exporter, off the event loop, and never at the request path's expense.

A bounded queue and one daemon thread, as the SDK's BatchSpanProcessor, but every span that does not
reach the collector is counted: `on_end` (the event loop's thread) only appends to a deque, or drops the
span when the queue is full; the thread exports batches every `schedule_delay_s` (sooner when a batch
is full), and a batch the exporter fails (a collector that is down, slow or refusing) is dropped whole.
So a collector that is down costs the request path one `deque.append` per span, and shows as
`llm_gateway_trace_spans_dropped_total` (the SDK's processor drops silently, with a log line per span).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class BoundedBatchProcessor(SpanProcessor):
    def __init__(self, exporter: SpanExporter, on_dropped: Callable[[int], None], *, max_queue_size: int,
                 max_batch: int, schedule_delay_s: float):
        self._exporter, self._on_dropped = exporter, on_dropped
        self._max_queue, self._max_batch, self._delay = max_queue_size, max_batch, schedule_delay_s
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # one export at a time: the thread's, or a flush's
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="gateway-span-export", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopping:
            return
        if len(self._queue) >= self._max_queue:
            self._on_dropped(1)
            return
        self._queue.append(span)
        if len(self._queue) >= self._max_batch:
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
                    sent = self._exporter.export(batch) is SpanExportResult.SUCCESS
                except Exception:  # an exporter bug must not end the thread; the batch is lost, counted
                    sent = False
                if not sent:
                    self._on_dropped(len(batch))
                    ok = False
        return ok

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything queued, in the caller's thread (tests, shutdown)."""
        return self._export_all()

    def shutdown(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=max(1.0, self._delay))
        self._export_all()
        self._exporter.shutdown()
