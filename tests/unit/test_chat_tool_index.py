"""Tool-call deltas without `index` (Gemini's OpenAI endpoint, some routers): `ChatStream` numbers them
per choice before they are assembled or forwarded — a new call id takes the next index, a delta with
neither id nor index continues the choice's latest call — at every split of the upstream's bytes; a
chunk that already has its indexes still leaves as the upstream's own bytes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from tests.unit.model_safety import safety
from tests.unit.reads import pump_reads, random_reads, splits, the_end

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gemini-x"}


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def call(cid: str | None = None, name: str | None = None, args: str = "", **extra: Any) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args}
    if name is not None:
        fn["name"] = name
    out: dict[str, Any] = {"function": fn, **extra}
    if cid is not None:
        out = {"id": cid, "type": "function", **out}
    return out


def body(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


# Gemini: each call whole, in its own chunk, with an id and no index
GEMINI = body([
    chunk({"role": "assistant", "content": None}),
    chunk({"tool_calls": [call("call_a", "weather", '{"city":"Paris"}')]}),
    chunk({"tool_calls": [call("call_b", "clock", '{"tz":"UTC"}')]}),
    chunk({}, "tool_calls"),
    {**BASE, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}},
])
# fragments without id or index continue the latest call; a repeated id goes back to its call
FRAGMENTS = body([
    chunk({"role": "assistant"}),
    chunk({"tool_calls": [call("call_a", "weather", '{"ci')]}),
    chunk({"tool_calls": [call(args='ty":"Paris"}')]}),
    chunk({"tool_calls": [call("call_b", "clock", "")]}),
    chunk({"tool_calls": [call(args='{"tz":')]}),
    chunk({"tool_calls": [call("call_b", args='"UTC"}')]}),
    chunk({}, "tool_calls"),
])
EXPECTED = {0: ("call_a", "weather", '{"city":"Paris"}'), 1: ("call_b", "clock", '{"tz":"UTC"}')}


def relay(reads: list[bytes], guard: bool = True) -> tuple[bytes, ChatStream]:
    run = safety(guard).start()
    assert run is not None
    stream = ChatStream(OpenAIStreamParser(), "p/x")
    filt = ChatOutputFilter(run.factory, forward_usage=True)
    out = pump_reads(stream, filt, reads)
    out.append(the_end(stream, filt))
    return b"".join(out), stream


def client_calls(client: bytes, choice: int = 0) -> dict[int, tuple[str, str, str]]:
    """The tool calls as the openai SDK's stream helper puts them together: by `index`, which every
    tool-call delta must carry as an int (the SDK raises TypeError otherwise)."""
    calls: dict[int, list[str]] = {}
    assert client.endswith(b"data: [DONE]\n\n"), "the core's end (`ChatStream.finish`)"
    for frame in client.split(b"\n\n"):
        if not frame or frame == b"data: [DONE]":
            continue
        for c in orjson.loads(frame.removeprefix(b"data: ")).get("choices") or ():
            for tc in (c.get("delta") or {}).get("tool_calls") or ():
                assert type(tc["index"]) is int, tc
                if c["index"] != choice:
                    continue
                slot = calls.setdefault(tc["index"], ["", "", ""])
                slot[0] = slot[0] or tc.get("id") or ""
                slot[1] = slot[1] or tc.get("function", {}).get("name") or ""
                slot[2] += tc.get("function", {}).get("arguments") or ""
    return {i: (a, b, c) for i, (a, b, c) in calls.items()}


def assembled(stream: ChatStream, choice: int = 0) -> dict[int, tuple[str, str, str]]:
    msg = stream.assembler.completion(id="x", model="m", created=1)["choices"][choice]["message"]
    return {i: (t["id"], t["function"]["name"], t["function"]["arguments"])
            for i, t in enumerate(msg.get("tool_calls") or ())}


def test_gemini_calls_in_separate_chunks_get_their_own_index_at_every_split() -> None:
    for reads in [[GEMINI], *splits(GEMINI)]:
        out, stream = relay(reads)
        assert client_calls(out) == EXPECTED, f"split at {len(reads[0])}"
        assert assembled(stream) == EXPECTED  # what is cached and judged
        assert stream.assembler.finished and not stream.ended_early


def test_fragments_continue_the_latest_call_and_a_known_id_its_own_at_every_split() -> None:
    for reads in [[FRAGMENTS], *splits(FRAGMENTS)]:
        out, stream = relay(reads)
        assert client_calls(out) == EXPECTED, f"split at {len(reads[0])}"
        assert assembled(stream) == EXPECTED


def test_random_reads_number_the_same() -> None:
    rng = random.Random(19)
    for data in (GEMINI, FRAGMENTS):
        for _ in range(50):
            out, stream = relay(random_reads(data, rng))
            assert client_calls(out) == EXPECTED and assembled(stream) == EXPECTED


def test_two_new_calls_in_one_chunk_and_a_numbered_call_before_them() -> None:
    data = body([
        chunk({"role": "assistant"}),
        chunk({"tool_calls": [call("call_x", "first", "{}", index=0)]}),
        chunk({"tool_calls": [call("call_a", "weather", '{"city":"Paris"}'), call("call_b", "clock", "{}")]}),
        chunk({}, "tool_calls"),
    ])
    want = {0: ("call_x", "first", "{}"), 1: ("call_a", "weather", '{"city":"Paris"}'), 2: ("call_b", "clock", "{}")}
    for reads in [[data], *splits(data)]:
        out, stream = relay(reads, guard=False)
        assert client_calls(out) == want and assembled(stream) == want


def test_each_choice_numbers_its_own_calls() -> None:
    data = body([
        chunk({"role": "assistant"}, index=0), chunk({"role": "assistant"}, index=1),
        chunk({"tool_calls": [call("call_a", "weather", "{}")]}, index=0),
        chunk({"tool_calls": [call("call_b", "clock", "{}")]}, index=1),
        chunk({"tool_calls": [call(args="")]}, index=1),
        chunk({}, "tool_calls", index=0), chunk({}, "tool_calls", index=1),
    ])
    out, stream = relay([data], guard=False)
    assert client_calls(out, 0) == {0: ("call_a", "weather", "{}")} == assembled(stream, 0)
    assert client_calls(out, 1) == {0: ("call_b", "clock", "{}")} == assembled(stream, 1)


def test_chunks_with_their_index_leave_as_the_upstream_s_own_bytes() -> None:
    """The fast path stays: nothing is re-encoded when every delta has its index (OpenAI's streams)."""
    data = (FIXTURES / "sse" / "chat_tools.sse").read_bytes()
    out, _ = relay([data], guard=False)
    assert out == data and data.endswith(b"data: [DONE]\n\n"), "the upstream's bytes, its end the core's"
    gemini, _ = relay([GEMINI], guard=False)
    assert b'"index":0' in gemini.split(b"\n\n")[1]  # the numbered chunk: re-encoded with its index
