"""CPU for one big SSE event delivered in small reads, against the same event in large reads (issue #27
item 5: an incomplete line must cost linear time).

One `data:` event of SIZE MiB (a JSON string) is fed, read by read, to the SSE decoder alone and to each
API's stream core after its commit, as the relay feeds them (chat: `ChatStream` with an OpenAI parser;
Responses: `ResponsesStream`; Messages: `MessagesStream`, native Anthropic). Process CPU time per
configuration, best of REPEAT; a quadratic decoder shows as 1 KiB reads costing many times 1 MiB reads.

    .venv/bin/python -m bench.bench_sse_reads [--size-mib 7] [--repeat 3]

Against another checkout (its `gateway` package first on the path, no bytecode written there):

    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/path/to/checkout .venv/bin/python -m bench.bench_sse_reads
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

import gateway
from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.sse import SSEDecoder
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from gateway.providers.convert.responses_pass_through import OpenAIResponsesStreamParser

READS = (1024, 16 * 1024, 1024 * 1024)


def chat_body(size: int) -> tuple[bytes, bytes]:
    """(a first chunk that commits the stream, the big chunk)."""
    def chunk(text: str) -> bytes:
        obj = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        return b"data: " + orjson.dumps(obj) + b"\n\n"
    return chunk("Hi"), chunk("x" * size)


def messages_body(size: int) -> tuple[bytes, bytes]:
    def delta(text: str) -> bytes:
        obj = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        return b"event: content_block_delta\ndata: " + orjson.dumps(obj) + b"\n\n"
    start = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                                  "model": "c", "usage": {"input_tokens": 1, "output_tokens": 1}}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    head = b"".join(b"event: " + o["type"].encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n"  # type: ignore[operator]
                    for o in (start, block))
    return head + delta("Hi"), delta("x" * size)


def responses_body(size: int) -> tuple[bytes, bytes]:
    def delta(text: str, seq: int) -> bytes:
        obj = {"type": "response.output_text.delta", "item_id": "msg_0", "output_index": 0, "content_index": 0,
               "delta": text, "sequence_number": seq}
        return b"event: response.output_text.delta\ndata: " + orjson.dumps(obj) + b"\n\n"
    resp = {"id": "r", "object": "response", "status": "in_progress", "model": "m", "output": []}
    events = [{"type": "response.created", "response": resp, "sequence_number": 0},
              {"type": "response.output_item.added", "output_index": 0, "sequence_number": 1,
               "item": {"id": "msg_0", "type": "message", "role": "assistant", "content": []}},
              {"type": "response.content_part.added", "item_id": "msg_0", "output_index": 0, "content_index": 0,
               "part": {"type": "output_text", "text": ""}, "sequence_number": 2}]
    head = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"  # type: ignore[attr-defined]
                    for e in events)
    return head + delta("Hi", 3), delta("x" * size, 4)


def decoder_feed(big: bytes, read: int) -> int:
    dec = SSEDecoder()
    n = 0
    for i in range(0, len(big), read):
        n += len(dec.feed(big[i:i + read]))
    return n


def core_feed(make: Callable[[], tuple[object, object]], body: Callable[[int], tuple[bytes, bytes]],
              size: int) -> Callable[[bytes, int], int]:
    head, big = body(size)

    def run(_: bytes, read: int) -> int:
        stream, filt = make()
        stream.feed(head)  # type: ignore[attr-defined]
        assert stream.committable  # type: ignore[attr-defined]
        stream.commit(filt)  # type: ignore[attr-defined]
        out = 0
        for i in range(0, len(big), read):
            out += len(stream.feed(big[i:i + read]))  # type: ignore[attr-defined]
        assert out > size, "the big event went out"
        return out
    return run


def cases_for(size: int) -> dict[str, Callable[[bytes, int], int]]:
    """What is measured: the decoder alone and each stream core, by name."""
    return {
        "decoder": decoder_feed,
        "chat core": core_feed(lambda: (ChatStream(OpenAIStreamParser(), "b"), ChatOutputFilter(None, True)),
                               chat_body, size),
        "responses core": core_feed(lambda: (ResponsesStream(OpenAIResponsesStreamParser(), "b"),
                                             ResponsesOutputFilter(None)), responses_body, size),
        "messages core": core_feed(lambda: (MessagesStream(AnthropicMessagesStreamParser(), "b"),
                                            MessagesOutputFilter(None)), messages_body, size),
    }


def cpu(fn: Callable[[bytes, int], int], big: bytes, read: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn(big, read)
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=float, default=7.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    size = int(args.size_mib * 1024 * 1024)
    big = chat_body(size)[1]
    cases = cases_for(size)
    print(f"gateway from {gateway.__file__}; one {args.size_mib:g} MiB event; CPU seconds, best of {args.repeat}")
    print(f"{'path':<16}" + "".join(f"{f'{r // 1024} KiB reads':>16}" for r in READS) + f"{'1 KiB / 1 MiB':>16}")
    for name, fn in cases.items():
        secs = [cpu(fn, big, r, args.repeat) for r in READS]
        print(f"{name:<16}" + "".join(f"{s:>16.3f}" for s in secs) + f"{secs[0] / max(secs[-1], 1e-9):>15.1f}x")


if __name__ == "__main__":
    main()
