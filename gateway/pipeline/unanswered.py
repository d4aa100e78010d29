"""Attempts the upstream was asked, and billed, that do not answer the client (docs/extensions.md, "Attempts
without an answer"): an empty answer dropped for the next deployment, a hedge that lost, an attempt cut
by its client's leaving before the first token, an attempt the gateway stopped waiting for (a timeout).
Each is charged against its own deployment (`RequestContext.charge_unanswered`): the usage it reported,
or the estimate of its prompt (and of the output that came), marked estimated; the request's spend row,
`tpm`, budget and log line carry the charge (`RequestContext.fold_unanswered`).

Only failure paths come here: a request whose attempt answers does no work of this module's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from gateway.config.types import Deployment
from gateway.core.events import Failure, FailureKind, StreamFailed, Usage
from gateway.core.stream import StreamCore
from gateway.core.usage_estimate import reported
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.upstream import UpstreamError

# why an attempt is charged without answering: the log line's `unanswered_attempts[].reason` (a timeout's
# is its failure kind's value: `first_token_timeout`, `idle_timeout`, `total_timeout`)
EMPTY_ANSWER, HEDGE_LOST, CLIENT_GONE = "empty_answer", "hedge_lost", "client_gone"
# the failures an upstream bills: it had the prompt and was working on it when the gateway stopped waiting,
# a cut by its caller. Every other failure is the upstream's refusal or its own fault (an error status, a
# rate limit or quota, an in-band error, a connection that failed or closed before any byte): not billed,
# not charged (docs/extensions.md, "Attempts without an answer").
BILLED_FAILURES = frozenset({FailureKind.FIRST_TOKEN_TIMEOUT, FailureKind.IDLE_TIMEOUT, FailureKind.TOTAL_TIMEOUT})
# an empty answer has ended: what may still come is its usage (a chat stream's comes after the finish)
USAGE_WAIT_S = 1.0
USAGE_MAX_BYTES = 64 * 1024

OutputFilterFactory = Callable[[Any, bool], Any]  # `ServedApi.output_filter`


async def dropped(ctx: RequestContext, opened: Opened[StreamCore], reason: str,
                  output_filter: OutputFilterFactory) -> None:
    """A result the attempt loop drops: an empty answer (read to its end first, for its usage: a
    reasoning model's empty answer may have billed many tokens) or a hedge's loser that reached its
    first token with the winner. Charged, then closed, whatever happens while reading."""
    stream = opened.stream
    try:
        if reason == EMPTY_ANSWER:
            await _read_to_end(opened, output_filter)
    finally:
        opened.close()
        ctx.rec.dropped(opened.deployment, reason)  # its span ends as what it was
        asm = stream.assembler
        ctx.charge_unanswered(opened.deployment, reason, reported(asm.usage), asm.output_bytes(),
                              whole=reason == EMPTY_ANSWER and stream.done)


async def _read_to_end(opened: Opened[StreamCore], output_filter: OutputFilterFactory) -> None:
    """The rest of an ended answer through its core, committed to a filter that releases everything to no
    client, within `USAGE_WAIT_S` and `USAGE_MAX_BYTES`: past either, it is charged what was read."""
    stream, resp = opened.stream, opened.response
    if resp is None or stream.done:
        return  # a held body, or a stream read to its end: its usage is in the assembler
    stream.commit(output_filter(None, False))
    read = 0
    with contextlib.suppress(TimeoutError, UpstreamError, StreamFailed):
        async with asyncio.timeout(USAGE_WAIT_S):
            while not stream.done and read <= USAGE_MAX_BYTES:
                data = await resp.next_chunk()
                if not data:
                    stream.end_of_input()
                    stream.drain()  # a translating parser's closing events may carry the usage
                    break
                read += len(data)
                stream.feed(data)


def cancelled(ctx: RequestContext, d: Deployment, tracked: object, exc: asyncio.CancelledError) -> None:
    """An attempt on `d` cancelled on its way: the hedge it lost (its cancellation says `HEDGE_LOST`) or
    its client gone (any other cancellation of the request). `tracked`: what it had opened (`Opened`:
    the usage its upstream reported so far, as Anthropic's `message_start` counts the input), else the
    prompt's estimate. Its request may still have been connecting: it is charged all the same (telling
    the two apart would cost every attempt a step)."""
    reason = HEDGE_LOST if exc.args == (HEDGE_LOST,) else CLIENT_GONE
    so_far, output = _so_far(tracked)
    if reason == CLIENT_GONE:
        ctx.failed_deployment = d  # the last one tried (docs/reference.md, "Logs": `deployment`)
    ctx.charge_unanswered(d, reason, so_far, output)


def failed(ctx: RequestContext, d: Deployment, tracked: object, failure: Failure) -> None:
    """An attempt on `d` that failed: charged only when its upstream bills the failure (`BILLED_FAILURES`:
    the first token, a stream's next bytes or a whole body waited for past its timeout), what it
    reported so far raised to the estimate of the prompt and of the output read. `tracked`: what it had
    opened (`Opened`), if anything: an error status whose body was waited for in vain is the upstream's
    error, not billed. A first-token timeout while its connection was still being set up (`connect_s` at
    or over `first_token_s`) is charged too: the attempt does not tell the two apart."""
    if failure.kind not in BILLED_FAILURES:
        return
    if isinstance(tracked, Opened) and tracked.response is not None and tracked.response.status != 200:
        return
    so_far, output = _so_far(tracked)
    ctx.charge_unanswered(d, failure.kind.value, so_far, output)


def unfinished(ctx: RequestContext, d: Deployment, tracked: object,
               exc: UpstreamError | asyncio.CancelledError) -> None:
    """An attempt on `d` that ended without a result: `cancelled`, or `failed`."""
    if isinstance(exc, asyncio.CancelledError):
        cancelled(ctx, d, tracked, exc)
    else:
        failed(ctx, d, tracked, exc.failure)


def _so_far(tracked: object) -> tuple[Usage | None, int]:
    """What an unfinished attempt (`Opened`, else nothing to read) had of its upstream: the usage it
    reported (as Anthropic's `message_start` counts the input) and the bytes of output it sent."""
    if not isinstance(tracked, Opened):
        return None, 0
    asm = tracked.stream.assembler
    return reported(asm.usage), asm.output_bytes()
