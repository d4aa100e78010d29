"""CPU per event of a Bedrock stream beside an SSE stream of the same text (issue #30, point 4).

The same Claude answer (EVENTS text deltas of one word each, then the block stop, message_delta and
message_stop) is fed one upstream event per read, as the relay feeds them after the commit:
- as Anthropic's own SSE, to the Messages core (native parser) and to the chat core (Anthropic -> chat);
- as Bedrock InvokeModelWithResponseStream frames (each event base64 in a `chunk` frame, CRCs and all),
  through the event-stream transcoder into the same cores with the bedrock cells' parsers;
- as ConverseStream frames (a non-Claude model) into the chat core;
- the transcoder alone.
Process CPU time per event, best of REPEAT.

    .venv/bin/python -m bench.bench_bedrock [--events 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import orjson

import gateway
from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.core.eventstream import BedrockStreamTranscoder
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.providers.chat_bedrock import BedrockChatStreamParser
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser
from gateway.providers.messages_bedrock import BedrockMessagesStreamParser
from tests.eventstream_frames import chunk, event  # the frame writer the scripted Bedrock uses

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs")


def anthropic_events(n: int) -> list[dict[str, Any]]:
    start = {"type": "message_start", "message": {
        "id": "msg_bench", "type": "message", "role": "assistant", "content": [], "model": "claude",
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 1}}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    deltas = [{"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": f" {WORDS[i % len(WORDS)]}"}} for i in range(n)]
    end = [{"type": "content_block_stop", "index": 0},
           {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": n}},
           {"type": "message_stop"}]
    return [start, block, *deltas, *end]


def converse_reads(n: int) -> list[bytes]:
    evs = [("messageStart", {"role": "assistant"})]
    evs += [("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": f" {WORDS[i % len(WORDS)]}"}})
            for i in range(n)]
    evs += [("contentBlockStop", {"contentBlockIndex": 0}), ("messageStop", {"stopReason": "end_turn"}),
            ("metadata", {"usage": {"inputTokens": 12, "outputTokens": n, "totalTokens": 12 + n}})]
    return [event(name, payload) for name, payload in evs]


def sse_reads(n: int) -> list[bytes]:
    return [b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in anthropic_events(n)]


def frame_reads(n: int) -> list[bytes]:
    return [chunk(e) for e in anthropic_events(n)]


Make = Callable[[], tuple[Any, Any]]


def relay(make: Make, reads: list[bytes], transcode: bool) -> int:
    """Every read through (the transcoder and) the core, committed at the first token; bytes out."""
    stream, filt = make()
    coder = BedrockStreamTranscoder() if transcode else None
    out, committed = 0, False
    for data in reads:
        if coder is not None:
            data = coder.feed(data)
        out += len(stream.feed(data))
        if not committed and stream.committable:
            out += len(stream.commit(filt))
            committed = True
    assert committed and out > 0
    return out


def transcoder_only(reads: list[bytes]) -> int:
    coder = BedrockStreamTranscoder()
    return sum(len(coder.feed(r)) for r in reads)


def cases(n: int) -> dict[str, Callable[[], int]]:
    sse, frames, converse = sse_reads(n), frame_reads(n), converse_reads(n)

    def messages(parser: Callable[[], Any]) -> Make:
        return lambda: (MessagesStream(parser(), "b"), MessagesOutputFilter(None))

    def chat(parser: Callable[[], Any]) -> Make:
        return lambda: (ChatStream(parser(), "b"), ChatOutputFilter(None, True))

    return {
        "messages, SSE (anthropic)": lambda: relay(messages(AnthropicMessagesStreamParser), sse, False),
        "messages, bedrock frames": lambda: relay(messages(BedrockMessagesStreamParser), frames, True),
        "chat, SSE (anthropic)": lambda: relay(chat(lambda: AnthropicStreamParser(1)), sse, False),
        "chat, bedrock frames": lambda: relay(chat(lambda: BedrockChatStreamParser(1)), frames, True),
        "chat, converse frames": lambda: relay(chat(lambda: BedrockChatStreamParser(1)), converse, True),
        "transcoder alone": lambda: transcoder_only(frames),
    }


def cpu(fn: Callable[[], int], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n_events = args.events + 5  # the deltas and the lifecycle around them
    print(f"gateway from {gateway.__file__}; {args.events} text deltas, one event per read; "
          f"CPU µs per event, best of {args.repeat}")
    for name, fn in cases(args.events).items():
        print(f"{name:<28}{cpu(fn, args.repeat) / n_events * 1e6:>8.2f}")


if __name__ == "__main__":
    main()
