"""The Responses masking rewrite and renumbering, with the real redaction and guard cores, fed values only.

The property: whatever the upstream's split, the deltas the client gets join to the one-shot redaction
of the text, and every later copy of that text (`*.done`, `content_part.done`, `output_item.done`,
`response.completed`) equals them; the client's events are numbered 0, 1, 2, ... without gaps.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config import parse_config
from gateway.core.redact.window import Redactor
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.wire import ResponsesParser
from gateway.core.sse import SSEDecoder
from gateway.core.stages import StageFactory
from gateway.pipeline.safety import SafetyRun, compile_safety
from tests.responses_scripts import Answer, frame, number

SECRET = "sk-proj-AbCdEf0123456789AbCdEf0123456789xyz"
TEXT = f"My key is {SECRET} so keep it"


def safety_run(guardrails: list[dict[str, Any]] | None = None, redaction: bool = True) -> SafetyRun:
    raw: dict[str, Any] = {
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}],
                    "redaction": "p" if redaction else "off",
                    "guardrails": [g["name"] for g in guardrails or []]}],
        "redaction": {"profiles": {"p": {"rules": ["secrets"], "custom": [{"name": "ticket",
                                                                           "pattern": "ACME-[0-9]{6}"}]}}},
        "guardrails": guardrails or [],
    }
    run = compile_safety(parse_config(raw, env={})).models["m"].start()
    assert run is not None
    return run


def run_filter(events: list[dict[str, Any]], factory: StageFactory | None) -> tuple[list[dict[str, Any]],
                                                                                   ResponsesOutputFilter, bytes]:
    """Upstream events -> the client's events (decoded), through the parser and the filter."""
    parser, filt = ResponsesParser(), ResponsesOutputFilter(factory)
    wire = b""
    for e in events:
        raw = orjson.dumps(e)
        wire += filt.apply(parser.parse(orjson.loads(raw), raw))
    wire += filt.flush_open()
    out = [orjson.loads(ev.data) for ev in SSEDecoder().feed(wire)]
    return out, filt, wire


def texts_everywhere(out: list[dict[str, Any]], delta_type: str, field: str = "text") -> dict[str, Any]:
    done_type = delta_type.replace(".delta", ".done")
    [completed] = [e for e in out if e["type"] == "response.completed"]
    [item_done] = [e for e in out if e["type"] == "response.output_item.done"]
    parts = [e["part"] for e in out if e["type"].endswith("part.done")]
    holder = "summary" if "summary" in delta_type else "content"
    return {
        "deltas": "".join(e["delta"] for e in out if e["type"] == delta_type),
        "done": next(e[field] for e in out if e["type"] == done_type),
        "part": parts[0][field],
        "item": item_done["item"][holder][0][field],
        "completed": completed["response"]["output"][0][holder][0][field],
    }


def splits(text: str, step: int = 3) -> list[list[str]]:
    out = []
    for i in range(1, len(text), step):
        for j in range(i + 1, len(text), step):
            out.append([text[:i], text[i:j], text[j:]])
    return out


@pytest.mark.parametrize("pieces", splits(TEXT))
def test_a_secret_split_across_deltas_is_masked_whole_everywhere(pieces: list[str]) -> None:
    events = Answer().message(pieces).stream_events()
    out, _, wire = run_filter(events, safety_run().factory)
    expected = Redactor.compile(["secrets"], []).redact(TEXT).text
    assert expected == "My key is [REDACTED:openai_key] so keep it"
    assert set(texts_everywhere(out, "response.output_text.delta").values()) == {expected}
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    leaks = [SECRET[s:s + 6] for s in range(len(SECRET) - 5) if SECRET[s:s + 6].encode() in wire]
    assert leaks == [], "no piece of the secret anywhere on the wire"


@pytest.mark.parametrize(("kind", "delta_type", "field"), [
    ("reasoning", "response.reasoning_summary_text.delta", "text"),
    ("refusal", "response.refusal.delta", "refusal"),
])
def test_reasoning_summaries_and_refusals_are_masked_too(kind: str, delta_type: str, field: str) -> None:
    pieces = ["Ticket AC", "ME-12", "3456 is ", "closed"]
    answer = Answer().reasoning(pieces) if kind == "reasoning" else Answer().message(pieces, refusal=True)
    out, _, _ = run_filter(answer.stream_events(), safety_run().factory)
    assert set(texts_everywhere(out, delta_type, field).values()) == {"Ticket [REDACTED:ticket] is closed"}


def test_without_a_filter_events_pass_as_the_upstreams_own_bytes() -> None:
    events = Answer().reasoning(["a"]).message(["b", "c"]).function_call("f", "call_1", ["{}"]).stream_events()
    out, _, wire = run_filter(events, None)
    assert wire == b"".join(frame(e) for e in events)
    assert out == events


def test_upstream_numbering_is_replaced_by_a_gapless_one() -> None:
    events = number(Answer().message(["x", "y"]).stream_events(), start=7)
    del events[3]  # a gap, as after a dropped event
    out, filt, _ = run_filter(events, None)
    assert [e["sequence_number"] for e in out] == list(range(len(events)))
    err = orjson.loads(next(iter(SSEDecoder().feed(filt.error_event({"code": "c", "message": "m"})))).data)
    assert err["sequence_number"] == len(events) and err["error"] == {"code": "c", "message": "m"}
    assert err["type"] == "error" and err["code"] == "c" and err["message"] == "m"


def test_unchanged_deltas_keep_their_bytes_and_changed_ones_lose_logprobs_and_padding() -> None:
    events = Answer().message(["plain ", "words ", "ACME-", "654321"]).stream_events()
    for e in events:
        if e["type"] == "response.output_text.delta":
            e["logprobs"] = [{"token": e["delta"], "logprob": -0.1, "top_logprobs": []}]
    out, _, wire = run_filter(events, safety_run().factory)
    deltas = [e for e in out if e["type"] == "response.output_text.delta"]
    assert "".join(d["delta"] for d in deltas) == "plain words [REDACTED:ticket]"
    assert [d["logprobs"] for d in deltas] == [[{"token": "plain ", "logprob": -0.1, "top_logprobs": []}],
                                               [{"token": "words ", "logprob": -0.1, "top_logprobs": []}], []], \
        "a delta released as it came keeps its own; the masked one's would spell out the text before the window"
    assert all("ACME" not in orjson.dumps(e).decode() for e in out)
    assert frame({**events[4], "sequence_number": 4}) in wire, "an unchanged delta goes as the upstream's bytes"


def listed(text: str) -> list[dict[str, Any]]:
    """A text's `logprobs` as OpenAI lists them (`include: ["message.output_text.logprobs"]`)."""
    return [{"token": t, "logprob": -0.1, "bytes": list(t.encode()), "top_logprobs": []}
            for t in (text[i:i + 4] for i in range(0, len(text), 4))]


def token_lists(value: Any) -> list[list[dict[str, Any]]]:
    """Every non-empty `logprobs` list anywhere in `value`."""
    if isinstance(value, list):
        return [found for v in value for found in token_lists(v)]
    if not isinstance(value, dict):
        return []
    own = value.get("logprobs")
    return ([own] if isinstance(own, list) and own else []) + token_lists(list(value.values()))


@pytest.mark.parametrize("pieces", splits(TEXT, 7))
def test_no_copy_of_the_text_lists_its_tokens_in_clear(pieces: list[str]) -> None:
    """Every event that carries the text carries its tokens too: each delta its own, and the `*.done`
    event, the part, the item and the final response the whole text's. Where the text was masked they
    would spell the secret out, so they are emptied everywhere."""
    events = Answer().message(pieces).stream_events()
    for e in events:
        if e["type"] == "response.output_text.delta":
            e["logprobs"] = listed(e["delta"])
        elif e["type"] == "response.output_text.done":
            e["logprobs"] = listed(e["text"])
        for part in [e.get("part"), *((e.get("item") or {}).get("content") or []),
                     *(c for item in (e.get("response") or {}).get("output") or [] for c in item["content"])]:
            if isinstance(part, dict) and part.get("text"):
                part["logprobs"] = listed(part["text"])
    out, _, _ = run_filter(events, safety_run().factory)
    spelled = ["".join(t["token"] for t in lists) for lists in token_lists(out)]
    assert all(SECRET[:10] not in text for text in spelled), "no list of tokens spells it"
    assert set(texts_everywhere(out, "response.output_text.delta").values()) == {
        "My key is [REDACTED:openai_key] so keep it"}


def test_text_that_came_only_in_done_events_is_masked_once_and_reused() -> None:
    events = [e for e in Answer().message([f"id ACME-{n}" for n in ("111111",)]).stream_events()
              if e["type"] != "response.output_text.delta"]
    out, _, _ = run_filter(events, safety_run().factory)
    done = texts_everywhere(out, "response.output_text.delta")
    assert done["deltas"] == ""
    assert {v for k, v in done.items() if k != "deltas"} == {"id [REDACTED:ticket]"}


def test_a_server_without_done_events_gets_its_tail_before_completed() -> None:
    events = [e for e in Answer().message(["keep ", "ACME-000", "111"]).stream_events()
              if not e["type"].endswith(".done") or e["type"] == "response.output_item.done"]
    out, _, _ = run_filter(number(events), safety_run().factory)
    types = [e["type"] for e in out]
    completed = types.index("response.completed")
    deltas = [e for e in out[:completed] if e["type"] == "response.output_text.delta"]
    assert "".join(d["delta"] for d in deltas) == "keep [REDACTED:ticket]"
    assert out[completed]["response"]["output"][0]["content"][0]["text"] == "keep [REDACTED:ticket]"


def test_stream_guardrail_refusal_releases_the_text_before_it_and_nothing_after() -> None:
    guard = {"name": "terms", "type": "terms", "terms": ["project nightingale"], "stage": "output",
             "mode": "stream"}
    events = Answer().message(["All about pro", "ject night", "ingale and more"]).stream_events()
    out, filt, _ = run_filter(events, safety_run([guard], redaction=False).factory)
    assert filt.refusal is not None and filt.refusal.guardrail == "terms"
    text = "".join(e["delta"] for e in out if e["type"] == "response.output_text.delta")
    assert text == "All about ", "the words before the violating term, nothing of it"
    assert not any(e["type"] in ("response.output_text.done", "response.completed") for e in out)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))


def test_upstream_flat_error_gets_the_nested_error_object_too() -> None:
    flat = {"type": "error", "code": "server_error", "message": "boom", "param": None, "sequence_number": 9}
    out, _, _ = run_filter([flat], None)
    assert out == [{**flat, "sequence_number": 0,
                    "error": {"message": "boom", "type": "api_error", "param": None, "code": "server_error"}}]
    nested = {"type": "error", "sequence_number": 0, "error": {"type": "tokens", "code": "rate_limit_exceeded",
                                                               "message": "slow", "param": None}}
    out, _, wire = run_filter([nested], None)
    assert out == [nested] and wire == frame(nested)
