"""Another attempt's typed events as Messages events of the stream they continue (docs/continuation.md), sans
I/O: its text into the open text block (or a new one after the last), its end as the protocol's own
(`content_block_stop`, `message_delta` with the stop reason and the summed usage, `message_stop`).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.core.events import (
    DeltaKind,
    Failure,
    FailureKind,
    Finish,
    OutputDelta,
    StreamEvent,
    StreamFailed,
    ToolCallDelta,
    Usage,
)
from gateway.core.messages.assemble import MessagesAssembler
from gateway.core.messages.wire import MessagesEvent, parse_event


def continued_events(asm: MessagesAssembler, events: list[StreamEvent], label: str,
                     take: Callable[[MessagesEvent], None]) -> None:
    """`take(ev)` each Messages event for `events`, in order (the caller folds each into `asm` before
    the next is built, so a block it opened is open for the next)."""
    stop: str | None = None
    usage: Usage | None = None
    for e in events:
        t = type(e)
        if t is OutputDelta:
            assert isinstance(e, OutputDelta)
            if e.kind is DeltaKind.CONTENT:
                take(parse_event({"type": "content_block_delta", "index": _text_block(asm, take),
                                  "delta": {"type": "text_delta", "text": e.text}}, None))
        elif t is ToolCallDelta:
            raise StreamFailed(Failure(FailureKind.MALFORMED, f"{label}: a tool call cannot continue this stream"))
        elif t is Finish:
            assert isinstance(e, Finish)
            stop = e.reason or "end_turn"
        elif t is Usage:
            assert isinstance(e, Usage)
            usage = e
    if stop is None:
        return
    open_block = asm.open_text_block()
    if open_block is not None:
        take(parse_event({"type": "content_block_stop", "index": open_block}, None))
    take(parse_event({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                      "usage": _anthropic_usage(usage)}, None))
    take(parse_event({"type": "message_stop"}, None))


def _text_block(asm: MessagesAssembler, take: Callable[[MessagesEvent], None]) -> int:
    index = asm.open_text_block()
    if index is None:
        index = asm.last_block() + 1
        take(parse_event({"type": "content_block_start", "index": index,
                          "content_block": {"type": "text", "text": ""}}, None))
    return index


def _anthropic_usage(u: Usage | None) -> dict[str, object]:
    """OpenAI-normalised counts back in Anthropic's terms (`Usage.as_anthropic`); with none reported, no
    count but the required `output_tokens`."""
    return {"output_tokens": 0} if u is None else u.as_anthropic()
