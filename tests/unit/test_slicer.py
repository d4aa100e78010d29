"""pipeline.slicer: prompts masked a slice at a time, in turn, exactly as one-shot redaction."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.redact.window import Redactor
from gateway.pipeline.slicer import INLINE_CHARS, SLICE_CHARS, Slicer

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
