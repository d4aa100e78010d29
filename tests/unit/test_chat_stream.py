"""`ChatStream` with no socket: recorded upstream bodies fed in every two-read split and in random reads,
with redaction and a stream guardrail on, give the client the same bytes as one read of the whole body."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream, StreamParser
from gateway.core.events import StreamFailed
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from tests.unit.model_safety import safety
from tests.unit.reads import pump_reads, random_reads, splits, the_end

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def chat_body(parts: list[str]) -> bytes:
    """An OpenAI stream: role chunk, one content chunk per part, finish, usage, [DONE]."""
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x"}
    objs = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    objs += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in parts]
    objs.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    objs.append({**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(parts)}})
    return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


SECRET_BODY = chat_body(["token ", SECRET[:7], SECRET[7:20], SECRET[20:], " then ", "more ", "text."])
GUARDED_BODY = chat_body(["all ", "fine, ", "then Project ", "Nightin", "gale ", "ends ", "here."])
BODIES: list[tuple[str, bytes, Callable[[], StreamParser]]] = [
    *[(p.name, p.read_bytes(), OpenAIStreamParser) for p in sorted((FIXTURES / "sse").glob("chat_*.sse"))],
    ("anthropic_thinking_text_tools", (FIXTURES / "anthropic" / "thinking_text_tools.sse").read_bytes(),
     lambda: AnthropicStreamParser(created=1)),
    ("secret_across_chunks", SECRET_BODY, OpenAIStreamParser),
    ("guardrail_term_across_chunks", GUARDED_BODY, OpenAIStreamParser),
]


def relay(reads: list[bytes], parser: Callable[[], StreamParser], guard: bool) -> bytes:
    """What the pipeline does with a ChatStream, minus the sockets: hold until committable, commit,
    feed each read, stop at the core's end or a refusal, flush the windows."""
    run = safety(guard).start()
    assert run is not None
    stream = ChatStream(parser(), "p/x")
    filt = ChatOutputFilter(run.factory, forward_usage=True)
    out = pump_reads(stream, filt, reads)
    out.append(the_end(stream, filt))
    return b"".join(out)


TEXT_KEYS = ("content", "reasoning_content", "reasoning", "refusal")


def reading(client: bytes) -> tuple[dict[tuple[int, str], str], list[object]]:
    """What the client reads: the text of each choice and kind, and every event with its text taken out
    (content-only chunks then say nothing and are dropped). Which chunk carries a piece of text may
    change with the split: the redaction window holds a word cut at the end of a read until the next
    read, and a chunk left unchanged leaves as the upstream's own bytes; the text and the events may not."""
    assert client.endswith(b"\n\n") or not client
    texts: dict[tuple[int, str], str] = {}
    others: list[object] = []
    for frame in client.split(b"\n\n"):
        if not frame:
            continue
        if frame == b"data: [DONE]":  # the end the core writes (`ChatStream.finish`): it must be there
            others.append("[DONE]")
            continue
        obj = orjson.loads(frame.removeprefix(b"data: "))
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            for key in TEXT_KEYS:
                if isinstance(delta.get(key), str):
                    slot = (choice.get("index", 0), key)
                    texts[slot] = texts.get(slot, "") + delta.pop(key)
        content_only = all(not (c.get("delta") or c.get("finish_reason")) for c in obj.get("choices") or ())
        if not (content_only and obj.get("choices") and set(obj) <= {"id", "object", "created", "model",
                                                                       "choices", "system_fingerprint"}):
            others.append(obj)
    return texts, others


@pytest.mark.parametrize(("name", "body", "parser"), BODIES, ids=[b[0] for b in BODIES])
@pytest.mark.parametrize("guard", [False, True], ids=["redaction", "redaction+guardrail"])
def test_every_split_gives_the_one_read_bytes(name: str, body: bytes, parser: Callable[[], StreamParser],
                                              guard: bool) -> None:
    whole = reading(relay([body], parser, guard))
    assert whole != ({}, [])  # every body answers something
    for reads in splits(body):
        assert reading(relay(reads, parser, guard)) == whole, f"split at {len(reads[0])}"


@pytest.mark.parametrize(("name", "body", "parser"), BODIES, ids=[b[0] for b in BODIES])
def test_random_reads_give_the_one_read_bytes(name: str, body: bytes, parser: Callable[[], StreamParser]) -> None:
    rng = random.Random(name)
    whole = reading(relay([body], parser, True))
    for _ in range(50):
        assert reading(relay(random_reads(body, rng), parser, True)) == whole


def test_the_secret_is_masked_and_never_leaves_in_part() -> None:
    for reads in splits(SECRET_BODY):
        out = relay(reads, OpenAIStreamParser, guard=False)
        assert SECRET[:4].encode() not in out
        assert reading(out)[0] == {(0, "content"): "token [REDACTED:github_token] then more text."}


def test_the_guardrail_stops_the_text_at_the_term() -> None:
    out = relay([GUARDED_BODY], OpenAIStreamParser, guard=True)
    assert reading(out)[0] == {(0, "content"): "all fine, then "}


def test_the_preamble_is_held_until_the_first_token() -> None:
    stream = ChatStream(OpenAIStreamParser(), "p/x")
    role_only = SECRET_BODY[:SECRET_BODY.index(b"\n\n") + 2]
    assert stream.feed(role_only) == b"" and not stream.committable and len(stream.preamble) == 1
    stream.feed(SECRET_BODY[len(role_only):])
    assert stream.committable and stream.unread_datas  # the rest of the read waits for the commit


def test_an_inband_error_before_the_first_token_fails_the_attempt() -> None:
    stream = ChatStream(OpenAIStreamParser(), "p/x")
    with pytest.raises(StreamFailed):
        stream.feed(b'data: {"error": {"message": "overloaded", "type": "overloaded_error"}}\n\n')


def test_a_stream_cut_early_still_gets_the_text_the_window_held_then_one_error() -> None:
    """The window holds a possible secret's start; the upstream stops without a finish or [DONE]. The
    relay asks how the stream ended before it flushes the windows, so the error event carries the held
    text first (the old chat relay flushed it, then discarded it for the error event)."""
    cut = chat_body(["see you ", "at alice@exam"]).split(b'"finish_reason":"stop"')[0]
    cut = cut[:cut.rindex(b"data: ")]  # up to the last content chunk: no finish, no usage, no [DONE]
    run = safety(False).start()
    assert run is not None
    stream = ChatStream(OpenAIStreamParser(), "p/x")
    filt = ChatOutputFilter(run.factory, forward_usage=True)
    relayed = b"".join(pump_reads(stream, filt, [cut]))
    end = the_end(stream, filt)

    def events(out: bytes) -> list[Any]:
        return [orjson.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: ")]

    def text(datas: list[Any]) -> str:
        return "".join(d["choices"][0]["delta"].get("content") or "" for d in datas if d.get("choices"))

    assert "alice@exam" not in text(events(relayed)), "the window held the possible address"
    assert text(events(relayed + end)) == "see you at alice@exam"
    datas = events(relayed + end)
    assert "error" in datas[-1] and all("error" not in d for d in datas[:-1])
