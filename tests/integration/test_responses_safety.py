"""Responses redaction, guardrails and metrics end to end (CONTRACT §5, §6) with the official openai SDK."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from gateway.core.sse import SSEDecoder
from tests.fake_upstream import FakeUpstream, Pause, Script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.responses_scripts import USAGE, Answer, body_script, frame, stream_script

PATH = "/v1/responses"
KEY = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
ANSWER = f"Sure. Your key is {KEY} and the ticket ACME-123456 is open.\n"
MASKED = "Sure. Your key is [REDACTED:openai_key] and the ticket [REDACTED:ticket] is open.\n"
TERM = {"name": "blocked-terms", "type": "terms", "terms": ["project nightingale"], "stage": "output"}


def config(url: str, *, guardrails: list[dict[str, Any]] | None = None, redaction: str = "p") -> Any:
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}], "redaction": redaction,
                    "guardrails": [g["name"] for g in guardrails or []]}],
        "guardrails": guardrails or [],
        "redaction": {"profiles": {"p": {"rules": ["secrets"],
                                         "custom": [{"name": "ticket", "pattern": "ACME-[0-9]{6}"}]}}},
    }, env={})


def sdk(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)


def pieces(text: str, sizes: tuple[int, ...] = (1, 2, 3, 5)) -> list[str]:
    out, i, n = [], 0, 0
    while i < len(text):
        out.append(text[i:i + sizes[n % len(sizes)]])
        i, n = i + sizes[n % len(sizes)], n + 1
    return out


def test_secret_split_across_deltas_is_masked_whole_in_deltas_done_and_completed(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    answer = Answer().reasoning(pieces(f"The user pasted {KEY} earlier.")).message(pieces(ANSWER))
    upstream.enqueue(PATH, stream_script(answer.stream_events()), stream_script(answer.stream_events()),
                     body_script(answer))
    with sdk(gw).responses.stream(model="m", input="hello") as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    [done] = [e.text for e in events if e.type == "response.output_text.done"]
    [completed] = [e for e in events if e.type == "response.completed"]
    assert "".join(deltas) == done == completed.response.output_text == final.output_text == MASKED
    for piece in deltas:
        for i in range(len(KEY) - 5):
            assert KEY[i:i + 6] not in piece, "no delta carries any part of the secret"
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == "The user pasted [REDACTED:openai_key] earlier."
    assert final.output[0].summary[0].text == summary  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    with sdk(gw).responses.with_streaming_response.create(model="m", input="hello", stream=True) as raw:
        wire = raw.read()
    assert all(KEY[i:i + 6].encode() not in wire for i in range(len(KEY) - 5)), "nothing of it on the wire"
    assert len(SSEDecoder().feed(wire)) == len(events)
    body = sdk(gw).responses.create(model="m", input="hello")
    assert body.output_text == MASKED and body.output[0].summary[0].text == summary  # type: ignore[union-attr]
    servers.run(wait_until(lambda: gw.sample("llm_gateway_requests_total", api="responses", model="m",
                                             stream="true", outcome="ok") == 2))  # counted after its end
    assert gw.sample("llm_gateway_redactions_total", rule="openai_key") == 6
    assert gw.sample("llm_gateway_redactions_total", rule="ticket") == 3


def test_the_done_event_lists_no_token_of_a_masked_secret(upstream: FakeUpstream,
                                                          make_gateway: Callable[..., GatewayServer]) -> None:
    """A client that asks for logprobs (`include`) gets every token of the text in its
    `response.output_text.done` too: the text before masking, so they go where the text was masked."""
    events = Answer().message(pieces(ANSWER)).stream_events()
    for e in events:
        if e["type"] == "response.output_text.done":
            e["logprobs"] = [{"token": ANSWER[i:i + 4], "logprob": -0.1, "bytes": [], "top_logprobs": []}
                             for i in range(0, len(ANSWER), 4)]
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, stream_script(events))
    got = list(sdk(gw).responses.create(model="m", input="hello", stream=True,
                                        include=["message.output_text.logprobs"]))
    [done] = [e for e in got if e.type == "response.output_text.done"]
    assert done.text == MASKED
    assert KEY[:12] not in "".join(t.token for t in done.logprobs)


def stream_events(gw: GatewayServer) -> tuple[list[Any], BaseException | None]:
    got: list[Any] = []
    try:
        for e in sdk(gw).responses.create(model="m", input="hello", stream=True):
            got.append(e)
    except openai.APIError as exc:
        return got, exc
    return got, None


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_stream_guardrail_ends_the_stream_at_the_violation(upstream: FakeUpstream,
                                                           make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, guardrails=[{**TERM, "mode": "stream"}], redaction="off"))
    upstream.enqueue(PATH, stream_script(Answer().message(["Welcome to pro", "ject night", "ingale. More"])
                                         .stream_events()))
    got, err = stream_events(gw)
    assert isinstance(err, openai.APIError) and err.code == "guardrail_blocked"
    assert text_of(got) == "Welcome to "
    assert not any(e.type == "response.completed" for e in got)
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail="blocked-terms", stage="output",
                     verdict="block") == 1


@pytest.mark.parametrize("mode", ["hold", "audit"])
def test_whole_answer_guardrails_refuse_instead_of_completing(upstream: FakeUpstream,
                                                              make_gateway: Callable[..., GatewayServer],
                                                              mode: str) -> None:
    gw = make_gateway(config(upstream.base_url, guardrails=[{**TERM, "mode": mode}], redaction="off"))
    bad = Answer().message(["All about project ", "nightingale."]).stream_events()
    good = Answer().message(["All ", "fine."]).stream_events()
    upstream.enqueue(PATH, stream_script(bad), stream_script(good))
    got, err = stream_events(gw)
    assert isinstance(err, openai.APIError) and err.code == "guardrail_blocked"
    assert text_of(got) == ("" if mode == "hold" else "All about project nightingale.")
    assert not any(e.type == "response.completed" for e in got)
    got, err = stream_events(gw)
    assert err is None and text_of(got) == "All fine." and got[-1].type == "response.completed"
    assert [e.sequence_number for e in got] == list(range(len(got)))


def test_non_stream_body_is_judged_whole(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, guardrails=[{**TERM, "mode": "stream"}]))
    upstream.enqueue(PATH, body_script(Answer().message(["project nightingale"])))
    with pytest.raises(openai.BadRequestError) as info:
        sdk(gw).responses.create(model="m", input="hello")
    assert info.value.code == "guardrail_blocked"


def test_input_guardrail_reads_instructions_and_input_items(upstream: FakeUpstream,
                                                            make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, guardrails=[{**TERM, "stage": "input"}]))
    items = [{"role": "user", "content": [{"type": "input_text", "text": "tell me about Project Nightingale"}]}]
    with pytest.raises(openai.BadRequestError) as info:
        sdk(gw).responses.create(model="m", input=items)  # type: ignore[arg-type]
    assert info.value.code == "guardrail_blocked"
    with pytest.raises(openai.BadRequestError):
        sdk(gw).responses.create(model="m", input="hi", instructions="mention project nightingale")
    assert upstream.received == []


def test_usage_tokens_and_time_to_first_token_metrics(servers: LoopThread, upstream: FakeUpstream,
                                                      make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, redaction="off"))
    usage = {**USAGE, "input_tokens": 120, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 40,
             "output_tokens_details": {"reasoning_tokens": 25}}
    events = Answer(usage=usage).reasoning(["think"]).message(["a", "b"]).stream_events()
    first_token = next(i for i, e in enumerate(events) if e["type"].endswith(".delta"))
    # the upstream thinks for a moment before its first token: TTFT must include that wait
    parts = [frame(e) for e in events[:first_token]] + [Pause(0.3)] + [frame(e) for e in events[first_token:]]
    upstream.enqueue(PATH, Script(parts), body_script(Answer(usage=usage).message(["c"])))
    list(sdk(gw).responses.create(model="m", input="x", stream=True))
    sdk(gw).responses.create(model="m", input="x")
    for stream in ("true", "false"):  # a request is counted last, once its handler has returned
        servers.run(wait_until(lambda s=stream: gw.sample(
            "llm_gateway_requests_total", api="responses", model="m", stream=s, outcome="ok") == 1))

    def tokens(kind: str) -> float:
        return gw.sample("llm_gateway_tokens_total", model="m", provider="up", type=kind)

    assert (tokens("input"), tokens("output"), tokens("cached_input"), tokens("reasoning")) == (240, 80, 200, 50)
    labels = {"api": "responses", "model": "m", "provider": "up"}
    assert gw.sample("llm_gateway_time_to_first_token_seconds_count", **labels) == 1
    ttft = gw.sample("llm_gateway_time_to_first_token_seconds_sum", **labels)
    assert ttft >= 0.3, "measured at the first token, after the upstream's wait, not at the preamble"
    assert gw.sample("llm_gateway_time_to_first_token_seconds_bucket", le="0.3", **labels) == 0
    assert gw.sample("llm_gateway_upstream_time_to_first_token_seconds_count", model="m", provider="up",
                     deployment="up/x") == 1
    assert gw.sample("llm_gateway_time_to_first_token_seconds_count", api="chat", model="m", provider="up") == 0
