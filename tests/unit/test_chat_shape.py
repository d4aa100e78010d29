"""Reading content-only chunks by their bytes (`core.chat_shape`): whatever it reads, a full JSON parse
reads the same; whatever it cannot prove, it leaves to the parse."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.chat.shape import MAX_UNMATCHED_LEARNS, ContentShape, plain_string, string_token
from gateway.core.chat.wire import content_only
from gateway.core.sse import SSEDecoder


def openai(text: str, pad: str | None = "Xy3") -> bytes:
    """OpenAI's envelope, compact, with its per-chunk `obfuscation` padding (protocols.md §2.3)."""
    obj: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                           "model": "gpt-4o", "service_tier": "default", "system_fingerprint": "fp_1",
                           "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None,
                                        "finish_reason": None}]}
    if pad is not None:
        obj["obfuscation"] = pad
    return orjson.dumps(obj)


def spaced(text: str) -> bytes:
    """Python's json.dumps separators, as some servers send them."""
    return b'{"id": "c", "choices": [{"index": 2, "delta": {"content": %s}, "finish_reason": null}], "model": "m"}' \
        % orjson.dumps(text)


def llamacpp(text: str) -> bytes:
    """Fields in another order, the choice list first."""
    return b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":%s}}],"created":1,"id":"x",' \
        b'"model":"gemma","object":"chat.completion.chunk"}' % orjson.dumps(text)


ENVELOPES = [openai, lambda t: openai(t, None), spaced, llamacpp]


def learned(render: Any, text: str = "Hello") -> ContentShape:
    shape = ContentShape()
    shape.learn(render(text), text)
    assert shape.learned
    return shape


def parsed_text(raw: bytes) -> str | None:
    try:
        return content_only(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return None


@pytest.mark.parametrize("render", ENVELOPES)
def test_chunks_of_the_learned_envelope_are_read_without_a_parse(render: Any) -> None:
    shape = learned(render)
    for text in ["Hi", " world", "é 中文 🙂", "a,b:{c}[d]", "x" * 500]:
        raw = render(text)
        hit = shape.match(raw)
        assert hit is not None and hit[0] == text
        assert raw[hit[1]:hit[2]] == orjson.dumps(text)
    assert shape.index == orjson.loads(render("z"))["choices"][0]["index"]


@pytest.mark.parametrize("render", ENVELOPES)
def test_text_that_needs_unescaping_is_left_to_the_parse(render: Any) -> None:
    shape = learned(render)
    for text in ['say "hi"', "line\nbreak", "back\\slash", "tab\there", ""]:
        assert shape.match(render(text)) is None


def test_other_chunks_of_the_stream_are_left_to_the_parse() -> None:
    shape = learned(openai)
    finish = openai("x").replace(b'"finish_reason":null', b'"finish_reason":"stop"')
    usage = openai("x").replace(b'"system_fingerprint"', b'"usage":{"prompt_tokens":1},"system_fingerprint"')
    two = openai("x").replace(b'"content":"x"', b'"content":"x","role":"assistant"')
    other_id = openai("x").replace(b"chatcmpl-1", b"chatcmpl-2")
    for raw in [finish, usage, two, other_id, b"[DONE]", b"", b"{}"]:
        assert shape.match(raw) is None


def test_a_new_envelope_is_learned_again() -> None:
    shape = learned(openai)
    changed = openai("x").replace(b"fp_1", b"fp_2")
    assert shape.match(changed) is None
    shape.learn(changed, "x")
    assert shape.match(openai("y").replace(b"fp_1", b"fp_2")) == ("y", *_span(changed.replace(b'"x"', b'"y"')))


def test_learns_in_a_row_take_effect_in_their_order() -> None:
    """A learn waits for the shape's next use; learns with no use between them still run in order, so
    the last envelope that proves out is the one matched, and a later unprovable chunk keeps it."""
    other = openai("x").replace(b"fp_1", b"fp_2")
    shape = ContentShape()
    shape.learn(openai("x"), "x")
    shape.learn(other, "x")
    shape.learn(b'{"choices":[{"index":0,"delta":{"content":"\\u0041"}}]}', "A")  # no split: kept as is
    assert shape.match(openai("y")) is None
    assert shape.match(other.replace(b'"x"', b'"y"')) is not None
    assert shape.index == 0


def _span(raw: bytes) -> tuple[int, int]:
    start = raw.index(b'"content":') + len(b'"content":')
    return start, raw.index(b'"', start + 1) + 1


def test_no_unique_split_means_nothing_is_learned() -> None:
    shape = ContentShape()
    shape.learn(openai("gpt-4o"), "gpt-4o")  # the model's name is the same string
    shape.learn(b'{"choices":[{"index":0,"delta":{"content":"\\u0041"}}]}', "A")  # escaped upstream
    assert not shape.learned


def test_a_split_the_probe_disproves_is_not_learned() -> None:
    # "idx" appears once as a string token, but it is a key, not the content: the probe's content
    # is not the probe
    shape = ContentShape()
    shape.learn(b'{"choices":[{"index":0,"delta":{"content":"x"}}],"idx":1}', "idx")
    assert not shape.learned


def test_a_stream_whose_envelope_changes_every_chunk_stops_being_learned() -> None:
    shape = ContentShape()
    for n in range(MAX_UNMATCHED_LEARNS):
        raw = openai("hi").replace(b"chatcmpl-1", b"chatcmpl-%d" % n)
        assert shape.match(raw) is None
        shape.learn(raw, "hi")
    last = openai("hi").replace(b"chatcmpl-1", b"chatcmpl-x")
    shape.learn(last, "hi")
    assert shape.match(last) is None, "learned after the limit"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(ENVELOPES))), st.text(), st.text(max_size=8))
def test_a_read_always_agrees_with_the_full_parse(which: int, text: str, pad: str) -> None:
    render = ENVELOPES[which]
    shape = learned(render)
    raw = render(text) if which else openai(text, pad)
    hit = shape.match(raw)
    if hit is None:
        return
    assert hit[0] == text == parsed_text(raw)
    spliced = raw[:hit[1]] + string_token("swapped \"in\"") + raw[hit[2]:]
    assert parsed_text(spliced) == 'swapped "in"'
    out: list[bytes] = []
    shape.splice_into(out, raw, hit[2], "new\ntext")
    event = b"".join(out)
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert orjson.loads(event[6:-2]) == {**orjson.loads(raw), "choices": [
        {**orjson.loads(raw)["choices"][0], "delta": {"content": "new\ntext"}}]}


@settings(max_examples=400, deadline=None)
@given(st.text(min_size=1, max_size=12), st.integers(0, 400), st.binary(max_size=3), st.integers(0, 3))
def test_a_damaged_chunk_is_never_misread(text: str, at: int, junk: bytes, cut: int) -> None:
    """Bytes inserted or removed anywhere: a read, if any, is what the parse reads."""
    shape = learned(openai)
    raw = openai(text)
    at = at % (len(raw) + 1)
    damaged = raw[:at] + junk + raw[at + cut:]
    hit = shape.match(damaged)
    if hit is not None:
        assert hit[0] == parsed_text(damaged)


@given(st.text())
def test_string_token_is_a_json_string(text: str) -> None:
    assert orjson.loads(string_token(text)) == text
    token = orjson.dumps(text)
    assert plain_string(token) in (None, text)


# runs: a read's chunks of the learned envelope read together

def _finish() -> bytes:
    return openai("x", None).replace(b'"content":"x"', b'"content":null').replace(
        b'"finish_reason":null', b'"finish_reason":"stop"')


_OTHERS = [_finish(), b"[DONE]", openai("x", None).replace(b"chatcmpl-1", b"chatcmpl-2"),
           openai("x", None).replace(b'"content":"x"', b'"content":"x","role":"assistant"'), b"{}", b"",
           # a data line that starts like the envelope and ends like it, but is two tokens in one
           openai("a", None).replace(b'"a"', b'"a","content":"b"')]
_TEXTS = st.one_of(st.text(max_size=6), st.sampled_from(['say "hi"', "line\nbreak", "back\\slash", "é中🙂",
                                                       "\u2028", "", " ", "\x00"]))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_TEXTS, st.sampled_from(range(len(_OTHERS)))), max_size=14))
def test_runs_read_what_the_parse_reads_chunk_by_chunk(items: list[str | int]) -> None:
    """Whatever mix of chunks a read brings: the segments give back every event's data in order; a
    run's chunks are exactly content-only chunks whose content is the run's text; what a run leaves
    to the parse is not such a chunk of the learned envelope (or carries no output token)."""
    shape = learned(lambda t: openai(t, None))
    datas = [openai(x, None) if isinstance(x, str) else _OTHERS[x] for x in items]
    segments = shape.runs(datas)
    assert segments is not None
    flat: list[bytes] = []
    for seg in segments:
        if isinstance(seg, list):
            assert seg, "no empty segment"
            flat += seg
            assert all(shape.match(data) is None for data in seg), "a chunk `match` reads was left out"
            continue
        flat += seg.datas
        assert seg.index == 0
        assert seg.texts == [parsed_text(d) for d in seg.datas]
        assert all(seg.texts), "an empty content is not an output token"
        assert seg.events(seg.texts) == b"".join(b"data: " + d + b"\n\n" for d in seg.datas)
    assert flat == datas


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=8), st.data())
def test_a_run_writes_what_the_window_released(texts: list[str], data: st.DataObject) -> None:
    shape = learned(lambda t: openai(t, None))
    segments = shape.runs([openai(t, None) for t in texts])
    assert segments is not None and len(segments) == 1
    run = segments[0]
    assert not isinstance(run, list)
    released = [data.draw(st.sampled_from([t, "", t + "\n[REDACTED]", 'q"\\'])) for t in texts]
    events = SSEDecoder().feed(run.events(released))
    kept = [r for r in released if r]
    assert [parsed_text(e.data) for e in events] == kept
    for e, text, r in zip(events, texts, kept, strict=False):
        expected = orjson.loads(openai(text, None))
        expected["choices"][0]["delta"]["content"] = r
        assert orjson.loads(e.data) == expected, "the learned envelope around the released text"


def test_a_padded_envelope_is_read_chunk_by_chunk() -> None:
    shape = learned(openai)
    assert shape.runs([openai("a"), openai("b")]) is None
    assert ContentShape().runs([openai("a"), openai("b")]) is None
