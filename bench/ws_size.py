"""What a WebSocket-mode turn costs to size, by conversation length (issue #63; bench/README.md, "#63,
2026-12-07, later"): `Conversation.body_size` and `keep` against writing the whole body out with
`json_body.encode`, as the size used to be taken, per turn of a growing conversation.

A turn carries 8 KB of instructions, 12 tools and one tool output of `--chars` characters, and is
answered with a short message and a tool call, as an agent's turns are; `--escapes` makes the tool output
text with quotes, newlines and non-ASCII (source code, logs) instead of plain ASCII.

    python -m bench.ws_size [--turns 10,30,100] [--chars 200,2000,8000] [--escapes] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gateway.core.body_scan import NOTHING
from gateway.core.json_body import encode
from gateway.core.responses.socket import Conversation

TOOLS = [{"type": "function", "name": f"tool{i}", "description": "d" * 300,
          "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}} for i in range(12)]
ESCAPED = 'line "q" \u00e9\n\tx'


def turn_body(i: int, previous: str | None, chars: int, escapes: bool) -> dict[str, Any]:
    output = (ESCAPED * chars)[:chars] if escapes else "o" * chars
    body: dict[str, Any] = {"model": "m", "instructions": "i" * 8000, "tools": TOOLS, "stream": True,
                            "input": [{"type": "function_call_output", "call_id": f"c{i}", "output": output}]}
    if previous:
        body["previous_response_id"] = previous
    return body


def answer(i: int) -> list[Any]:
    return [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a" * 400}]},
            {"type": "function_call", "call_id": f"c{i + 1}", "name": "tool1", "arguments": '{"a":"x"}'}]


def per_turn_us(turns: int, chars: int, escapes: bool, counted: bool) -> tuple[float, int]:
    """Seconds spent sizing, per turn, over one conversation (µs), and the last turn's size."""
    conv, previous, spent, size = Conversation(), None, 0.0, 0
    for i in range(turns):
        body = turn_body(i, previous, chars, escapes)
        whole, _ = conv.expand(body, NOTHING, NOTHING)
        t0 = time.perf_counter()
        size = conv.body_size(body) if counted else len(encode(body))
        spent += time.perf_counter() - t0
        t0 = time.perf_counter()
        conv.keep(f"r{i}", whole, answer(i), NOTHING)
        if counted:  # the count's share of keeping; writing the body out needs nothing kept
            spent += time.perf_counter() - t0
        previous = f"r{i}"
    return spent / turns * 1e6, size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", default="10,30,100")
    p.add_argument("--chars", default="200,2000,8000")
    p.add_argument("--escapes", action="store_true")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    print("| turns | tool output chars | conversation | written out µs a turn | counted µs a turn |")
    print("| --- | --- | --- | --- | --- |")
    for turns in map(int, args.turns.split(",")):
        for chars in map(int, args.chars.split(",")):
            written = min(per_turn_us(turns, chars, args.escapes, False)[0] for _ in range(args.repeat))
            runs = [per_turn_us(turns, chars, args.escapes, True) for _ in range(args.repeat)]
            counted, size = min(r[0] for r in runs), runs[0][1]
            print(f"| {turns} | {chars} | {size / 1024:.0f} KiB | {written:.1f} | {counted:.1f} |")


if __name__ == "__main__":
    main()
