"""The chat output filter with the real redaction window and guard window, at every split of a text."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config import parse_config
from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.events import DeltaKind
from gateway.core.sse import SSEDecoder
from gateway.pipeline.safety import compile_safety
from tests.unit.model_safety import safety

SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
TEXT = f"token {SECRET} then Project Nightingale ends"


def chunks_for(parts: list[str]) -> list[dict[str, Any]]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x"}
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    out += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in parts]
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out.append({**base, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    return out


def run(parts: list[str], guard: bool, forward_usage: bool = False) -> tuple[list[str], list[dict[str, Any]], Any]:
    run_ = safety(guard).start()
    assert run_ is not None
    filt = ChatOutputFilter(run_.factory, forward_usage)
    wire = b""
    for obj in chunks_for(parts):
        raw = orjson.dumps(obj)
        wire += filt.apply(orjson.loads(raw), raw)
        if filt.refusal is not None:
            break
    events = [orjson.loads(e.data) for e in SSEDecoder().feed(wire)]
    texts = [c["choices"][0]["delta"].get("content") or "" for c in events if c["choices"]]
    return texts, events, filt.refusal


@pytest.mark.parametrize("i", range(len(TEXT) + 1))
def test_every_two_piece_split_masks_the_secret_whole(i: int) -> None:
    text = TEXT.replace(" then Project Nightingale ends", " ends")
    texts, events, _ = run([text[:i], text[i:]], guard=False)
    assert "".join(texts) == "token [REDACTED:github_token] ends"
    assert all(SECRET[:6] not in t for t in texts)
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(e["choices"] for e in events), "usage chunk dropped when the client did not ask"


@pytest.mark.parametrize("i", range(len(TEXT) + 1))
def test_every_split_stops_before_the_guarded_term(i: int) -> None:
    texts, _, refusal = run([TEXT[:i], TEXT[i:]], guard=True)
    assert refusal is not None and refusal.guardrail == "g"
    released = "".join(texts)
    assert "token [REDACTED:github_token] then ".startswith(released)
    assert "Project" not in released and "Nightingale" not in released


def test_one_character_deltas_and_usage_forwarding() -> None:
    text = TEXT.replace("Project Nightingale", "nothing")
    texts, events, refusal = run(list(text), guard=True, forward_usage=True)
    assert refusal is None
    assert "".join(texts) == text.replace(SECRET, "[REDACTED:github_token]")
    assert events[-1]["choices"] == [] and events[-1]["usage"]["prompt_tokens"] == 1


def test_unchanged_chunks_are_forwarded_as_the_upstream_bytes() -> None:
    filt = ChatOutputFilter(None, False)
    raw = b'{"id":"c",  "choices":[{"index":0,"delta":{"content":"hi"}}]}'
    assert filt.apply(orjson.loads(raw), raw, True) == b"data: " + raw + b"\n\n"
    assert filt.output_released


def test_text_released_before_one_guards_violation_still_passes_the_later_guards() -> None:
    config = parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"p": {"type": "mock"}},
        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}], "guardrails": ["late", "early"]}],
        "guardrails": [{"name": "late", "type": "terms", "terms": ["omega"]},
                       {"name": "early", "type": "terms", "terms": ["alpha"]}],
    }, env={})
    run_ = compile_safety(config).models["m"].start()
    assert run_ is not None
    chain = run_.factory(DeltaKind.CONTENT)
    assert chain is not None
    released, verdict = chain.push("first alpha then omega")  # "late" refuses at omega; "early" at alpha
    assert verdict is not None
    assert released == "first ", "text before either violation only"


@pytest.mark.parametrize("size, group", [(1, 5), (3, 2), (7, 100)])
def test_content_push_releases_in_all_what_release_content_does(size: int, group: int) -> None:
    parts = [TEXT[i:i + size] for i in range(0, len(TEXT), size)]
    direct = ChatOutputFilter(safety(False).start().factory, False)  # type: ignore[union-attr]
    pushed = ChatOutputFilter(safety(False).start().factory, False)  # type: ignore[union-attr]
    push = pushed.content_push(0)
    assert push is not None
    released = [piece for i in range(0, len(parts), group) for piece in push(parts[i:i + group])]
    assert len(released) == len(parts)
    assert "".join(released) == "".join(direct.release_content(0, p) for p in parts)
    assert "[REDACTED:github_token]" in "".join(released)


def test_content_push_is_left_to_release_content_where_a_stage_can_refuse() -> None:
    guarded = ChatOutputFilter(safety(True).start().factory, False)  # type: ignore[union-attr]
    assert guarded.content_push(0) is None
    plain = ChatOutputFilter(None, False)
    push = plain.content_push(0)
    assert push is not None and push(["as is"]) == ["as is"]


def with_logprobs(obj: dict[str, Any], field: str = "content") -> dict[str, Any]:
    """The chunk as a server sends it when the client asked for `logprobs`: every token of the delta
    listed, with its bytes (vLLM lists a reasoning delta's tokens under `content` too)."""
    for choice in obj["choices"]:
        text = choice["delta"].get(field) or ""
        tokens = [text[i:i + 3] for i in range(0, len(text), 3)]
        choice["logprobs"] = {"content": [{"token": t, "logprob": -0.5, "bytes": list(t.encode()),
                                           "top_logprobs": [{"token": t, "logprob": -0.5, "bytes": None}]}
                                          for t in tokens], "refusal": None}
    return obj


def leaks(wire: bytes) -> bool:
    """Any 6 characters of the secret, in the text or in the bytes arrays of a token (as JSON numbers)."""
    spelled = ",".join(str(b) for b in SECRET.encode())
    return any(SECRET[i:i + 6].encode() in wire for i in range(len(SECRET) - 5)) or spelled in wire.decode()


@pytest.mark.parametrize("field", ["content", "reasoning_content", "refusal"])
@pytest.mark.parametrize("i", range(0, len(TEXT) + 1, 3))
def test_logprobs_never_spell_out_what_the_window_masked(field: str, i: int) -> None:
    """Tokens listed one by one (`logprobs`) are the text before the window: a chunk whose text the window
    changed (masked, held back, or a tail added) loses them; the rest keep theirs."""
    text = TEXT.replace(" then Project Nightingale ends", " ends")
    filt = ChatOutputFilter(safety(False).start().factory, False)  # type: ignore[union-attr]
    wire = b""
    parts = [text[:i], text[i:]]
    for obj in chunks_for([p for p in parts if p]):
        if obj["choices"] and "content" in obj["choices"][0]["delta"] and field != "content":
            obj["choices"][0]["delta"][field] = obj["choices"][0]["delta"].pop("content")
        with_logprobs(obj, field)
        raw = orjson.dumps(obj)
        wire += filt.apply(orjson.loads(raw), raw)
    assert not leaks(wire)
    events = [orjson.loads(e.data) for e in SSEDecoder().feed(wire)]
    got = "".join(c["choices"][0]["delta"].get(field) or "" for c in events if c["choices"])
    assert got == "token [REDACTED:github_token] ends"
    for c in events:
        logprobs = c["choices"][0].get("logprobs") if c["choices"] else None
        if logprobs and logprobs["content"]:  # kept: then they spell exactly what the client reads
            assert "".join(t["token"] for t in logprobs["content"]) == c["choices"][0]["delta"][field]
    if i == 6:
        assert events[1]["choices"][0]["logprobs"]["content"], "a chunk released as it came keeps them"


@pytest.mark.parametrize("etype, field", [("reasoning.text", "text"), ("reasoning.summary", "summary")])
@pytest.mark.parametrize("i", range(0, len(TEXT) + 1, 2))
def test_reasoning_details_are_masked_as_the_reasoning_beside_them(etype: str, field: str, i: int) -> None:
    """OpenRouter sends the reasoning twice: `reasoning`, and entries of `reasoning_details`. Each copy
    goes through a window of its own and the client reads both masked whole; what an entry's window
    still holds at the finish comes as an entry of the same type and index."""
    text = TEXT.replace(" then Project Nightingale ends", " ends")
    filt = ChatOutputFilter(safety(False).start().factory, False)  # type: ignore[union-attr]
    wire = b""
    for obj in chunks_for([p for p in (text[:i], text[i:]) if p]):
        delta = obj["choices"][0]["delta"] if obj["choices"] else {}
        if delta.get("content"):
            piece = delta.pop("content")
            delta.update(reasoning=piece, reasoning_details=[
                {"type": etype, field: piece, "format": "anthropic-claude-v1", "index": 0},
                {"type": "reasoning.encrypted", "data": "opaque", "index": 1}])
        raw = orjson.dumps(obj)
        wire += filt.apply(orjson.loads(raw), raw)
    assert all(SECRET[s:s + 6].encode() not in wire for s in range(len(SECRET) - 5))
    events = [orjson.loads(e.data) for e in SSEDecoder().feed(wire)]
    deltas = [c["choices"][0]["delta"] for c in events if c["choices"]]
    masked = "token [REDACTED:github_token] ends"
    assert "".join(d.get("reasoning") or "" for d in deltas) == masked
    entries = [e for d in deltas for e in d.get("reasoning_details") or []]
    assert "".join(e.get(field) or "" for e in entries if e["type"] == etype and e["index"] == 0) == masked
    assert [e["data"] for e in entries if e["type"] == "reasoning.encrypted"] == ["opaque"] * len(
        [p for p in (text[:i], text[i:]) if p])


AWS = "AKIAIOSFODNN7EXAMPLE"  # its rule ends on a boundary: two copies back to back are no match at all


@pytest.mark.parametrize("i", range(len(AWS) + 1))
def test_both_spellings_of_the_reasoning_are_each_masked_whole(i: int) -> None:
    """A server that sends the reasoning under both names (`reasoning_content` and `reasoning`, the same
    text) has each masked as it is in a body; one window for both saw the text twice back to back, where
    a rule that ends on a boundary matched neither copy."""
    filt = ChatOutputFilter(safety(False).start().factory, False)  # type: ignore[union-attr]
    wire = b""
    for obj in chunks_for(["key ", AWS[:i], AWS[i:], " is here"]):
        delta = obj["choices"][0]["delta"] if obj["choices"] else {}
        if delta.get("content"):
            delta["reasoning_content"] = delta["reasoning"] = delta.pop("content")
        raw = orjson.dumps(obj)
        wire += filt.apply(orjson.loads(raw), raw)
    assert AWS[:8].encode() not in wire and AWS[-8:].encode() not in wire
    deltas = [c["choices"][0]["delta"] for c in (orjson.loads(e.data) for e in SSEDecoder().feed(wire)) if c["choices"]]
    for field in ("reasoning_content", "reasoning"):
        assert "".join(d.get(field) or "" for d in deltas) == "key [REDACTED:aws_access_key_id] is here"
