"""`logprobs` through the text windows (`core.logprobs`): a text the redaction window (and a stream guardrail's)
only delayed keeps every token's entry, each going out with the chunk that carries its text, so each list
spells exactly the text beside it; a masked text lists no token of what it masked, and its entries come back
once the window holds nothing. Chat (the filter, and the stream core with its byte fast path) and Responses."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.wire import ResponsesParser
from gateway.core.sse import SSEDecoder
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from tests.responses_scripts import Answer
from tests.unit.model_safety import safety
from tests.unit.reads import pump_reads, random_reads, splits, the_end

SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PLAIN = "The river flows quietly on and on.\nThen it ends, calmly, here"
MASKED = f"key {SECRET} here.\nThen more words follow.\n"
MASKED_OUT = "key [REDACTED:github_token] here.\nThen more words follow.\n"
BASE = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x"}


def words(text: str) -> list[str]:
    """Tokens as GPT-style tokenizers cut prose: a word with the space before it, punctuation alone."""
    out: list[str] = []
    for ch in text:
        if not out or ch == " " or (ch.isalnum() != out[-1][-1:].isalnum() and not out[-1].isspace()):
            out.append(ch)
        else:
            out[-1] += ch
    return out


def threes(text: str) -> list[str]:
    return [text[i:i + 3] for i in range(0, len(text), 3)]


def entry(token: str) -> dict[str, Any]:
    return {"token": token, "logprob": -0.25, "bytes": list(token.encode()),
            "top_logprobs": [{"token": token, "logprob": -0.25, "bytes": list(token.encode())}]}


def token_chunks(tokens: list[str], field: str = "content") -> list[dict[str, Any]]:
    """An OpenAI stream asked for `logprobs`: a chunk per token, listing it (`refusal`'s under its own key)."""
    key = "refusal" if field == "refusal" else "content"
    chunks = [{**BASE, "choices": [{"index": 0, "delta": {"role": "assistant", field: ""}, "logprobs": None,
                                    "finish_reason": None}]}]
    for t in tokens:
        logprobs = {"content": None, "refusal": None, key: [entry(t)]}
        chunks.append({**BASE, "choices": [{"index": 0, "delta": {field: t}, "logprobs": logprobs,
                                            "finish_reason": None}]})
    chunks.append({**BASE, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]})
    return chunks


def client_chunks(wire: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(e.data) for e in SSEDecoder().feed(wire) if e.data != b"[DONE]"]


def read(chunks: list[dict[str, Any]], field: str = "content") -> tuple[str, list[str]]:
    """The text the client reads, and the tokens its lists spell, each chunk's checked to spell its text."""
    key = "refusal" if field == "refusal" else "content"
    text, spelled = "", []
    for c in chunks:
        for choice in c.get("choices") or ():
            piece = (choice.get("delta") or {}).get(field) or ""
            listed = ((choice.get("logprobs") or {}).get(key)) or []
            tokens = [t["token"] for t in listed]
            assert not tokens or "".join(tokens) == piece, f"a list spells exactly its chunk's text: {c}"
            assert all(bytes(t["bytes"]).decode() == t["token"] for t in listed)
            text += piece
            spelled += tokens
    return text, spelled


def through_filter(chunks: list[dict[str, Any]], guard: bool) -> list[dict[str, Any]]:
    run = safety(guard).start()
    assert run is not None
    filt = ChatOutputFilter(run.factory, False)
    wire = b""
    for obj in chunks:
        raw = orjson.dumps(obj)
        wire += filt.apply(orjson.loads(raw), raw)
    return client_chunks(wire + filt.flush_all())


@pytest.mark.parametrize("field", ["content", "reasoning_content", "refusal"])
@pytest.mark.parametrize("cut", [words, threes], ids=["words", "threes"])
@pytest.mark.parametrize("guard", [False, True], ids=["redaction", "redaction+guardrail"])
def test_a_text_the_window_only_delayed_keeps_every_token_entry_beside_its_text(field: str, cut: Any,
                                                                                guard: bool) -> None:
    tokens = cut(PLAIN)
    text, spelled = read(through_filter(token_chunks(tokens, field), guard), field)
    assert text == PLAIN
    assert spelled == tokens, "every entry reached the client, in order, with the chunk that carries its text"


@pytest.mark.parametrize("cut", [words, threes], ids=["words", "threes"])
def test_a_masked_text_lists_none_of_it_and_the_entries_come_back_after_it(cut: Any) -> None:
    tokens = cut(MASKED)
    chunks = through_filter(token_chunks(tokens), guard=False)
    text, spelled = read(chunks)
    assert text == MASKED_OUT
    wire = orjson.dumps(chunks).decode()
    assert SECRET[:6] not in wire and ",".join(str(b) for b in SECRET[:6].encode()) not in wire
    assert "".join(spelled).endswith("more words follow.\n"), "once the window held nothing, entries follow again"
    assert "".join(spelled).startswith("key"), "the text before the candidate kept its own"


def test_a_chunk_that_comes_as_it_was_keeps_its_bytes() -> None:
    run = safety(False).start()
    assert run is not None
    filt = ChatOutputFilter(run.factory, False)
    [first, whole] = token_chunks(["Hello there.\n"])[:2]
    raw = orjson.dumps(whole)
    filt.apply(first, None)
    assert filt.apply(orjson.loads(raw), raw) == b"data: " + raw + b"\n\n"


def mixed_body(tokens: list[str]) -> bytes:
    """A server that lists tokens on some chunks only: the others come with `"logprobs": null`, as
    content-only chunks the stream core reads from their bytes (the learned shape)."""
    chunks = token_chunks(tokens)
    for i, c in enumerate(chunks[1:-1]):
        if i % 3 == 2:
            c["choices"][0]["logprobs"] = None
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def through_stream(reads: list[bytes]) -> list[dict[str, Any]]:
    run = safety(False).start()
    assert run is not None
    stream = ChatStream(OpenAIStreamParser(), "p/x")
    filt = ChatOutputFilter(run.factory, forward_usage=True)
    out = pump_reads(stream, filt, reads)
    out.append(the_end(stream, filt))
    return client_chunks(b"".join(out))


@pytest.mark.parametrize(("source", "expected"), [(PLAIN, PLAIN), (MASKED, MASKED_OUT)], ids=["plain", "masked"])
def test_chunks_without_tokens_among_them_keep_the_text_whole_and_in_order(source: str, expected: str) -> None:
    body = mixed_body(words(source))
    rng = random.Random(source)
    for reads in [[body], *splits(body)[::7], *(random_reads(body, rng) for _ in range(20))]:
        chunks = through_stream(reads)
        text, spelled = read(chunks)
        assert text == expected, "the text of a chunk without tokens never overtakes text held for a token"
        assert SECRET[:6] not in orjson.dumps(chunks).decode()
        assert in_order(spelled, words(source)), "an entry goes out once, in its place"


def in_order(spelled: list[str], tokens: list[str]) -> bool:
    rest = iter(tokens)
    return all(any(t == s for t in rest) for s in spelled)


def responses_events(tokens: list[str]) -> list[dict[str, Any]]:
    events = Answer().message(tokens).stream_events()
    for e in events:
        if e["type"] == "response.output_text.delta":
            e["logprobs"] = [entry(e["delta"])]
        elif e["type"] == "response.output_text.done":
            e["logprobs"] = [entry(t) for t in tokens]
    return events


@pytest.mark.parametrize("cut", [words, threes], ids=["words", "threes"])
def test_a_responses_text_the_window_only_delayed_keeps_every_token_entry(cut: Any) -> None:
    tokens = cut(PLAIN)
    run = safety(False).start()
    assert run is not None
    parser, filt = ResponsesParser(), ResponsesOutputFilter(run.factory)
    wire = b""
    for e in responses_events(tokens):
        raw = orjson.dumps(e)
        wire += filt.apply(parser.parse(orjson.loads(raw), raw))
    out = [orjson.loads(ev.data) for ev in SSEDecoder().feed(wire + filt.flush_open())]
    deltas = [e for e in out if e["type"] == "response.output_text.delta"]
    for d in deltas:
        listed = [t["token"] for t in d["logprobs"]]
        assert not listed or "".join(listed) == d["delta"], d
    assert "".join(d["delta"] for d in deltas) == PLAIN
    assert [t["token"] for d in deltas for t in d["logprobs"]] == tokens
    [done] = [e for e in out if e["type"] == "response.output_text.done"]
    assert [t["token"] for t in done["logprobs"]] == tokens, "nothing was masked: the whole text's list stays"


@pytest.mark.parametrize("seed", range(40))
def test_any_tokenization_keeps_the_text_and_no_list_spells_what_was_masked(seed: int) -> None:
    rng = random.Random(seed)
    source = rng.choice([PLAIN, MASKED, MASKED + PLAIN, PLAIN + " " + MASKED])
    tokens, i = [], 0
    while i < len(source):
        n = rng.randint(1, 9)
        tokens.append(source[i:i + n])
        i += n
    redactor = safety(False).redactor
    assert redactor is not None
    text, spelled = read(through_filter(token_chunks(tokens), guard=seed % 2 == 1))
    assert text == redactor.redact(source).text, "the text the client reads is the one-shot redaction"
    assert in_order(spelled, tokens)
    assert SECRET[4:10] not in "".join(spelled)
    if source == PLAIN:
        assert spelled == tokens
