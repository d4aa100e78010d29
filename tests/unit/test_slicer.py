"""pipeline.slicer and its steps: texts masked and judged a slice at a time, in turn, exactly as one-shot."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.json_body import JsonText
from gateway.core.policy.guard import TextGuard, Verdict
from gateway.core.redact.sliced import MaskSteps
from gateway.core.redact.window import Redactor
from gateway.pipeline.slicer import INLINE_CHARS, LITERAL_SLICE_CHARS, SLICE_CHARS, Slicer

REDACTOR = Redactor.compile(["secrets", "pii"], [])
WORDS = ["sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv", "DE89", "3704", "0044", "0532", "0130", "00", "Bearer",
         "tok.QuietlyEchoed-9f8e7d6c5b4a", "4111", "1111", "a@b.co", "+44", "20", "7946", "hello", "日本語", "\n",
         "-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA", "-----END RSA PRIVATE KEY-----"]


def run(slots: list[tuple[dict[str, Any], str]]) -> None:
    async def go() -> None:
        await Slicer().redact(REDACTOR, slots)

    asyncio.run(go())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), max_size=400).map(" ".join), min_size=1, max_size=4))
def test_every_text_is_masked_exactly_as_one_shot_redaction(texts: list[str]) -> None:
    slots: list[tuple[dict[str, Any], str]] = [({"content": t}, "content") for t in texts]
    run(slots)
    assert [obj["content"] for obj, _ in slots] == [REDACTOR.redact(t).text for t in texts]


def test_a_long_run_and_a_secret_across_many_slices_are_masked_whole() -> None:
    secret = "sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv"
    text = "x" * (SLICE_CHARS - 5) + " " + secret + " " + "y" * (5 * SLICE_CHARS) + " tail " + secret
    slot = ({"t": text}, "t")
    run([slot])
    assert slot[0]["t"] == REDACTOR.redact(text).text and secret not in slot[0]["t"]


def test_a_long_text_with_nothing_to_mask_keeps_its_object() -> None:
    """A long text kept as its JSON literal (`json_body.JsonText`, a big body parsed in steps) is written
    back from that literal: replaced by an equal `str`, it was escaped again in one call (~30 ms for 10 MiB
    of non-ASCII text). A text with a mask is replaced."""
    clean = JsonText("日本語 " * (4 * SLICE_CHARS))
    clean.json = orjson.dumps(str(clean))
    masked = "x " * SLICE_CHARS + "sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv"
    slots: list[tuple[dict[str, Any], str]] = [({"t": clean}, "t"), ({"t": masked}, "t")]
    run(slots)
    assert slots[0][0]["t"] is clean
    assert slots[1][0]["t"] == REDACTOR.redact(masked).text != masked


def test_a_long_masked_text_comes_back_with_its_json_literal() -> None:
    """A masked text longer than a literal's slice is written back as a `JsonText` whose literal was written
    in steps: the translator writes it as it is instead of escaping the whole text again in one call."""
    text = 'é\n"中😀\\ ' * (LITERAL_SLICE_CHARS // 4) + "sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv"
    slots: list[tuple[dict[str, Any], str]] = [({"t": text}, "t")]
    run(slots)
    masked = slots[0][0]["t"]
    assert masked == REDACTOR.redact(text).text != text
    assert isinstance(masked, JsonText) and masked.json == orjson.dumps(str(masked))


def test_a_small_prompt_is_not_queued_behind_a_big_one() -> None:
    big_text = "DE89 " * (40 * SLICE_CHARS)
    small_text = "ask sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv " + "word " * (INLINE_CHARS // 4)
    order: list[str] = []

    async def go() -> None:
        sched = Slicer()

        async def one(name: str, text: str) -> None:
            await sched.redact(REDACTOR, [({"t": text}, "t")])
            order.append(name)

        big = asyncio.ensure_future(one("big", big_text))
        await asyncio.sleep(0)  # the big one is queued first
        assert sched.waiting == 1
        await asyncio.gather(big, one("small", small_text))

    asyncio.run(go())
    assert order == ["small", "big"], "round robin: the small prompt's few slices come before the big one's"


def test_a_request_that_goes_away_leaves_the_queue() -> None:
    async def go() -> int:
        sched = Slicer()
        slot = ({"t": "DE89 " * (20 * SLICE_CHARS)}, "t")
        task = asyncio.ensure_future(sched.redact(REDACTOR, [slot]))
        await asyncio.sleep(0)
        task.cancel()
        done = asyncio.ensure_future(sched.redact(REDACTOR, [({"t": "a b " * INLINE_CHARS}, "t")]))
        await done
        return sched.waiting

    assert asyncio.run(go()) == 0


# --- the steps themselves (pure cores): any slicing gives exactly the one-shot result ---

SECRETS_AND_PII = Redactor.compile(["secrets", "pii"], [("ticket", r"ACME-[0-9]{6}")])
GUARDS = [TextGuard.compile("ssn", "regex", [], [r"\b\d{3}-\d{2}-\d{4}\b"]),
          TextGuard.compile("spaced", "regex", [], [r"(?i)ignore\s+(?:all\s+)?previous\s+instructions"]),
          TextGuard.compile("terms", "terms", ["project nightingale", "secret sauce", "NIGHT"], [])]
GUARD_WORDS = ["123-45-6789", "123-45", "6789", "123", "-45-", "ignore", "IGNORE", "all", "previous",
               "instructions", "project", "Nightingale", "nightingale.", "secret", "sauce", "NIGHT", "night-1",
               "[REDACTED:email]", " ", "\n", "  \t ", "x" * 700, "日本語", "word"]


def texts_of(words: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(words), max_size=300).map(" ".join) | st.lists(
        st.sampled_from(words), max_size=300).map("".join)


@settings(max_examples=80, deadline=None)
@given(st.lists(texts_of(WORDS), max_size=4), st.integers(1, 700))
def test_mask_steps_give_the_one_shot_texts_and_counts_at_any_slice_size(texts: list[str], size: int) -> None:
    steps = MaskSteps(SECRETS_AND_PII, list(texts), size)
    while not steps.step():
        pass
    assert steps.step() and steps.texts == [SECRETS_AND_PII.redact(t).text for t in texts]
    for given_text, text in zip(texts, steps.texts, strict=True):  # one with no mask is not joined again
        assert text is given_text or SECRETS_AND_PII.redact(given_text).counts
    counts: dict[str, int] = {}
    for t in texts:
        for rule, n in SECRETS_AND_PII.redact(t).counts.items():
            counts[rule] = counts.get(rule, 0) + n
    assert steps.counts == counts


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(GUARDS), texts_of(GUARD_WORDS), st.integers(1, 700))
def test_guard_steps_give_the_one_shot_verdict_at_any_slice_size(guard: TextGuard, text: str, size: int) -> None:
    steps = guard.steps(text, size)
    while not steps.step():
        pass
    assert steps.verdict == guard.check(text)


@pytest.mark.parametrize("guard", GUARDS, ids=lambda g: g.name)
def test_a_violation_across_every_slice_boundary_is_found(guard: TextGuard) -> None:
    """The violating match straddles the cut between two slices, at every offset of the cut."""
    bad = {"ssn": "123-45-6789", "spaced": "ignore  previous\ninstructions", "terms": "project   nightingale"}
    text = "filler " * 80 + bad[guard.name] + " and more"
    assert not guard.check(text).allowed
    start = text.index(bad[guard.name])
    for cut in range(start - 1, start + len(bad[guard.name]) + 1):
        steps = guard.steps(text, cut)  # the first slice ends at `cut`
        while not steps.step():
            pass
        assert steps.verdict == guard.check(text), cut


def test_the_slicer_checks_a_long_text_exactly_as_one_shot() -> None:
    guard = GUARDS[0]
    text = "123-45 " * (3 * INLINE_CHARS) + "123-45-6789"

    async def go() -> list[Verdict]:
        sched = Slicer()
        return [await sched.check(guard, text), await sched.check(guard, text[:-12]), await sched.check(guard, "x")]

    assert asyncio.run(go()) == [guard.check(text), guard.check(text[:-12]), guard.passed()]


def test_the_slicer_returns_the_counts_of_the_masks_it_made() -> None:
    slots = [({"t": "a@b.co " * INLINE_CHARS}, "t"), ({"t": ""}, "t"),
             ({"t": "key sk-proj-AbCdEf0123456789GhIjKlMnOp"}, "t")]

    async def go() -> dict[str, int]:
        return await Slicer().redact(REDACTOR, slots)

    assert asyncio.run(go()) == {"email": INLINE_CHARS, "openai_key": 1}
    assert slots[1][0]["t"] == "" and slots[2][0]["t"] == "key [REDACTED:openai_key]"
