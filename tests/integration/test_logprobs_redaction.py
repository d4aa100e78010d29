"""A client that asks for `logprobs`, on a model with a redaction profile, through the official openai SDK
against the real gateway on loopback: the answer the window only delayed comes with every token listed,
each chunk's (or delta's) list spelling exactly its own text; where the window masked, no list spells what
it masked (docs/extensions.md, "Token lists go with masked text")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from tests.chat_scripts import chunk
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer
from tests.integration.test_safety import ANSWER, KEY, MASKED, config, sdk
from tests.responses_scripts import Answer, stream_script
from tests.unit.test_logprobs_follow_text import words

PLAIN = "The river flows quietly on and on.\nThen it ends, calmly, here."


def entry(token: str) -> dict[str, Any]:
    return {"token": token, "logprob": -0.1, "bytes": list(token.encode()),
            "top_logprobs": [{"token": token, "logprob": -0.1, "bytes": list(token.encode())}]}


def chat_stream(tokens: list[str]) -> Script:
    parts = [sse(chunk({"role": "assistant", "content": ""}))]
    for t in tokens:
        obj = chunk({"content": t})
        obj["choices"][0]["logprobs"] = {"content": [entry(t)], "refusal": None}
        parts.append(sse(obj))
    return Script([*parts, sse(chunk({}, "stop")), b"data: [DONE]\n\n"])


def read_chat(gw: GatewayServer) -> tuple[str, list[str]]:
    text, listed = "", []
    for c in sdk(gw).chat.completions.create(model="m", stream=True, logprobs=True,
                                             messages=[{"role": "user", "content": "x"}]):
        if not c.choices:
            continue
        piece = c.choices[0].delta.content or ""
        tokens = [t.token for t in (c.choices[0].logprobs.content or [])] if c.choices[0].logprobs else []
        assert not tokens or "".join(tokens) == piece, "a chunk's list spells exactly its own text"
        text, listed = text + piece, listed + tokens
    return text, listed


def test_a_chat_answer_the_window_only_delayed_lists_every_token(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue("/v1/chat/completions", chat_stream(words(PLAIN)), chat_stream(words(ANSWER)))
    assert read_chat(gw) == (PLAIN, words(PLAIN))
    text, listed = read_chat(gw)
    assert text == MASKED and KEY[:12] not in "".join(listed) and "ACME-1" not in "".join(listed)
    assert listed[:3] == ["Sure", ".", " Your"], "the text before the first mask keeps its own"


def test_a_responses_answer_the_window_only_delayed_lists_every_token(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    tokens = words(PLAIN)
    events = Answer().message(tokens).stream_events()
    for e in events:
        if e["type"] == "response.output_text.delta":
            e["logprobs"] = [entry(e["delta"])]
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue("/v1/responses", stream_script(events))
    o = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
    got = [e for e in o.responses.create(model="m", input="x", stream=True, include=["message.output_text.logprobs"])
           if e.type == "response.output_text.delta"]
    for d in got:
        assert not d.logprobs or "".join(t.token for t in d.logprobs) == d.delta
    assert "".join(d.delta for d in got) == PLAIN
    assert [t.token for d in got for t in d.logprobs] == tokens
