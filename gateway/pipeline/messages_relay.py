"""After the commit: relay the winning Messages attempt to the client, through the one pump (`relay.pump`).

The stream core (`core.messages.stream.MessagesStream`) does the per-event work and keeps the answer's
end (`message_delta` with the stop reason, `message_stop`) unsent, so the whole-answer guardrails (hold,
audit) judge before it goes out: a refusal replaces it with an error event. After the first token
nothing is retried: an upstream `error` is forwarded (scrubbed of our credentials first, by `held_end`) and
ends the stream; any other failure is one `event: error` of the gateway's own; nothing follows it.
"""

from __future__ import annotations

from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.held_end import HeldEndRelay, relay_held_end
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun


class _Relay(HeldEndRelay[MessagesStream, MessagesOutputFilter]):
    what = "message"


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[MessagesStream], client: StreamResponse,
                run: SafetyRun | None) -> None:
    """Write the held preamble and the first token, then the rest; end with the message's end or one
    error event."""
    await relay_held_end(_Relay(rt, ctx, opened, client, run, MessagesOutputFilter(run.factory if run else None)))
