"""After the commit: relay the winning Responses attempt to the client, through the one pump (`relay.pump`).

The stream core (`core.responses.stream.ResponsesStream`) does the per-event work and stops at the
terminal event (`response.completed` / `response.incomplete`), which waits for the whole-answer
guardrails (hold, audit): a refusal replaces it with an error event. After the first token nothing is
retried: an upstream `error` is forwarded and ends the stream; a `response.failed` is forwarded and
followed by one error event (the SDKs raise on it); any other failure is one error event (§4.3). A
forwarded failure is scrubbed of our credentials first (§5.3).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gateway.core.events import InbandError
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.responses.wire import ERROR_TYPES, ResponsesEvent
from gateway.core.scrub import scrub_failure, scrub_json
from gateway.errors import UpstreamFailed
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.attempts import provider_keys
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
        """An upstream failure after the first token: forwarded (renumbered, scrubbed), and the end."""
        d = self.opened.deployment
        if ev.obj is None:
            return StreamEnded("malformed", UpstreamFailed(f"{d.label}: malformed event after the first token"))
        ev = _scrubbed(ev, provider_keys(self.rt))
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


def _scrubbed(ev: ResponsesEvent, keys: list[str]) -> ResponsesEvent:
    """The upstream's failure event with our credentials masked (CONTRACT §5.3), the one place after the
    commit where upstream error text reaches the client (the attempt loop scrubs the ones before it).
    Always re-encoded from the parsed, scrubbed object, never forwarded as the upstream's bytes: what
    we checked is then exactly what the client gets (raw bytes can hold a secret the parse does not
    show, e.g. in the first of two duplicate members); an error event is rare, so one dump costs nothing.
    Off the happy path: called only when a failure event has come."""
    assert ev.obj is not None
    events = [InbandError(scrub_failure(e.failure, keys)) if type(e) is InbandError else e for e in ev.events]
    return dataclasses.replace(ev, obj=_scrub_event(ev.obj, keys), raw=None, events=events)


def _scrub_event(obj: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """All of the event but a `response.failed`'s `response.output`: that is the answer so far, model
    output that the redaction filter rewrites and that must stay the text the client was sent as
    deltas (CONTRACT §5.1)."""
    resp = obj.get("response")
    if not (isinstance(resp, dict) and "output" in resp):
        clean: dict[str, Any] = scrub_json(obj, keys)
        return clean
    rest = scrub_json({k: v for k, v in resp.items() if k != "output"}, keys)
    outer = scrub_json({k: v for k, v in obj.items() if k != "response"}, keys)
    return {**outer, "response": {**rest, "output": resp["output"]}}


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[ResponsesStream], client: StreamResponse,
                run: SafetyRun | None) -> None:
    """Write the held preamble and the first token, then the rest; end with the terminal event or one
    error event."""
    await relay_held_end(_Relay(rt, ctx, opened, client, run, ResponsesOutputFilter(run.factory if run else None)))
