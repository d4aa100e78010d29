"""Attempts the upstream was asked, and billed, that do not answer the client (docs/extensions.md, "Attempts
without an answer"): an empty answer dropped for the next deployment, a hedge that lost, an attempt cut
by its client's leaving before the first token. Each is charged against its own deployment
(`RequestContext.charge_unanswered`): the usage it reported, or the estimate of its prompt (and of the
output that came), marked estimated; the request's spend row, `tpm`, budget and log line carry the charge
(`RequestContext.fold_unanswered`).

Only failure paths come here: a request whose attempt answers does no work of this module's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from gateway.config.types import Deployment
from gateway.core.events import StreamFailed
from gateway.core.stream import StreamCore
from gateway.core.usage_estimate import reported
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.upstream import UpstreamError

# why an attempt is charged without answering: the log line's `unanswered_attempts[].reason`
EMPTY_ANSWER, HEDGE_LOST, CLIENT_GONE = "empty_answer", "hedge_lost", "client_gone"
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
    so_far, output = None, 0
    if isinstance(tracked, Opened):
        asm = tracked.stream.assembler
        so_far, output = reported(asm.usage), asm.output_bytes()
    if reason == CLIENT_GONE:
        ctx.failed_deployment = d  # the last one tried (docs/reference.md, "Logs": `deployment`)
    ctx.charge_unanswered(d, reason, so_far, output)
