"""After the commit: relay the winning Responses attempt to the client, through the one pump (`relay.pump`).

The stream core (`core.responses.stream.ResponsesStream`) does the per-event work and stops at the
terminal event (`response.completed` / `response.incomplete`), which waits for the whole-answer
guardrails (hold, audit): a refusal replaces it with an error event. After the first token nothing is
retried: an upstream `error` is forwarded and ends the stream; a `response.failed` is forwarded and
followed by one error event (the SDKs raise on it); any other failure is one error event (§4.3). A
forwarded failure is scrubbed of our credentials first (§5.3, by `held_end`).
"""

from __future__ import annotations

from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.responses.wire import ERROR_TYPES, ResponsesEvent
from gateway.errors import UpstreamFailed
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.held_end import HeldEndRelay, relay_held_end
from gateway.pipeline.relay import StreamEnded
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun


class _Relay(HeldEndRelay[ResponsesStream, ResponsesOutputFilter]):
    what = "response"

    def end_bytes(self) -> bytes:
        stream: ResponsesStream = self.stream
        return stream.end_bytes(self.filt)

    def failed(self, ev: ResponsesEvent) -> StreamEnded:
        """An upstream failure after the first token (scrubbed by the caller): forwarded, renumbered, and
        the end."""
        d = self.opened.deployment
        if ev.obj is None:
            return StreamEnded("malformed", UpstreamFailed(f"{d.label}: malformed event after the first token"))
        f = ev.failure
        assert f is not None
        if self.sink.hold is not None:  # the client has seen nothing of this lifecycle: only our error
            return StreamEnded("inband_error", UpstreamFailed(
                f"{d.label}: upstream failed after the first token ({f.code or f.kind.value})"))
        payload = self.filt.flush_open() + self.filt.apply(ev)
        if ev.type not in ERROR_TYPES:  # response.failed: close with an error event too
            payload += self.filt.error_event({"message": f.message, "type": f.type or "api_error",
                                              "param": f.param, "code": f.code})
        return StreamEnded("inband_error", payload=payload)

    def error_payload(self, end: StreamEnded) -> bytes:
        assert end.error is not None
        if self.sink.hold is not None:  # the client has seen nothing: an error event numbered from 0
            return ResponsesOutputFilter(None).error_event(end.error.body()["error"])
        tail = b"" if end.reason == "guardrail" else self.filt.flush_open()
        return tail + self.filt.error_event(end.error.body()["error"])


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[ResponsesStream], client: StreamResponse,
                run: SafetyRun | None) -> None:
    """Write the held preamble and the first token, then the rest; end with the terminal event or one
    error event."""
    await relay_held_end(_Relay(rt, ctx, opened, client, run, ResponsesOutputFilter(run.factory if run else None)))
