"""After the commit: relay the winning Messages attempt to the client, through the one pump (`relay.pump`).

The stream core (`core.messages.stream.MessagesStream`) does the per-event work and keeps the answer's
end (`message_delta` with the stop reason, `message_stop`) unsent, so the whole-answer guardrails (hold,
audit) judge before it goes out: a refusal replaces it with an error event. After the first token
nothing is retried: an upstream `error` is forwarded (scrubbed of our credentials first, by `held_end`) and
ends the stream; any other failure is one `event: error` of the gateway's own; nothing follows it.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.messages.wire import MessagesEvent
from gateway.errors import UpstreamFailed
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.held_end import HeldEndRelay, relay_held_end
from gateway.pipeline.relay import StreamEnded
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun


class _Relay(HeldEndRelay[MessagesStream, MessagesOutputFilter]):
    what = "message"

    async def after_pump(self) -> None:
        await self.sink.emit(self.stream.flushed, time.perf_counter(), self.filt.output_released)

    def end_bytes(self) -> bytes:
        stream: MessagesStream = self.stream
        return stream.end_bytes(self.filt)

    def failed(self, ev: MessagesEvent) -> StreamEnded:
        """An upstream `error` after the first token (scrubbed by the caller): forwarded, re-encoded from
        the parsed object (what was checked is exactly what the client gets), after what the windows held."""
        d = self.opened.deployment
        obj = ev.obj
        if obj is None:
            return StreamEnded("malformed", UpstreamFailed(f"{d.label}: malformed event after the first token"))
        if self.sink.hold is not None:  # the client has seen nothing of this answer: only our error
            f = ev.failure
            return StreamEnded("inband_error", UpstreamFailed(
                f"{d.label}: upstream failed after the first token ({f.code if f else 'error'})"))
        found = obj.get("error")
        err: dict[str, Any] = found if isinstance(found, dict) else {}
        body = {"type": "error", "error": {"type": err.get("type") or "api_error",
                                           "message": err.get("message") or "upstream error"}}
        ev = MessagesEvent("error", body, None)
        return StreamEnded("inband_error", payload=self.filt.flush_open() + self.filt.apply(ev))

    def error_payload(self, end: StreamEnded) -> bytes:
        assert end.error is not None
        tail = b"" if end.reason == "guardrail" or self.sink.hold is not None else self.filt.flush_open()
        return tail + end.error.anthropic_sse_bytes()


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[MessagesStream], client: StreamResponse,
                run: SafetyRun | None) -> None:
    """Write the held preamble and the first token, then the rest; end with the message's end or one
    error event."""
    await relay_held_end(_Relay(rt, ctx, opened, client, run, MessagesOutputFilter(run.factory if run else None)))
