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
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.held_end import HeldEndRelay, relay_held_end
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun


class _Relay(HeldEndRelay[ResponsesStream, ResponsesOutputFilter]):
    what = "response"


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[ResponsesStream], client: StreamResponse,
                run: SafetyRun | None) -> None:
    """Write the held preamble and the first token, then the rest; end with the terminal event or one
    error event."""
    await relay_held_end(_Relay(rt, ctx, opened, client, run, ResponsesOutputFilter(run.factory if run else None)))
