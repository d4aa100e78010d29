"""Mid-stream continuation on Chat Completions (CONTRACT §4.9, issue #32), end to end with the official
openai SDK against scripted upstreams: a stream that fails after its first token (a cut, an idle stall,
an in-band error) is continued on the model's next deployment, by prefill or by regenerating, and the
client reads one answer; a divergence, or a failure inside a tool call, ends it with one error event.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import USAGE, chunk, error_script, text_stream
from tests.contract_metrics import CONTINUATION_METRICS
from tests.fake_upstream import Close, FakeUpstream, Hang, Part, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until

A, B = "/a/v1/chat/completions", "/b/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "count"}]
WHOLE = ["One, ", "two, ", "three, ", "four, ", "five."]
ROLE = sse(chunk({"role": "assistant", "content": ""}))
FIRST_USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def config(url: str, *, b_prefill: bool | None = True, idle_s: float = 5, continuation: Any = "on",
           redaction: str = "off", max_attempts: int = 4, b_type: str = "openai") -> Any:
    t = {"connect_s": 1, "first_token_s": 5, "idle_s": idle_s, "total_s": 30}
    b_url = f"{url}/b/v1" if b_type == "openai" else f"{url}/b"
    b_deployment: dict[str, Any] = {"provider": "b", "model": "model-b"}
    if b_prefill is not None:
        b_deployment["prefill"] = b_prefill
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "a": {"type": "openai", "base_url": f"{url}/a/v1", "api_key": "ka", "timeouts": t},
            "b": {"type": b_type, "base_url": b_url, "api_key": "kb", "timeouts": t, "learn_ttl_s": 60},
        },
        "redaction": {"profiles": {"default": {"rules": ["secrets"]}}},
        "models": [{"name": "m", "continuation": continuation, "redaction": redaction,
                    "retry": {"max_attempts": max_attempts, "per_deployment": 1, "initial_backoff_ms": 1,
                              "max_backoff_ms": 5},
                    "deployments": [{"provider": "a", "model": "model-a"}, b_deployment]}],
    }, env={})


def sdk(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", timeout=30, max_retries=0)


def read(gw: GatewayServer, **kw: Any) -> tuple[str, list[Any]]:
    """The client's accumulated text and every chunk it read (the SDK raises on an error event)."""
    chunks = list(sdk(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True, **kw))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks


def failing(pieces: list[str], end: Part | list[Part], usage: bool = False) -> Script:
    """The first deployment: the pieces, then its failure."""
    extra = {"usage": FIRST_USAGE} if usage else {}
    parts: list[Part] = [ROLE, *[sse(chunk({"content": p}, **extra)) for p in pieces]]
    return Script(parts + (end if isinstance(end, list) else [end]))


INBAND = sse({"error": {"message": "overloaded", "type": "server_error", "code": "server_error"}})
FAILURES = {"cut": Close(), "stall": Hang(), "inband": INBAND}


@pytest.mark.parametrize("how", sorted(FAILURES))
def test_a_failed_stream_is_continued_by_prefill(how: str, upstream: FakeUpstream,
                                                 make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, idle_s=0.3 if how == "stall" else 5))
    upstream.enqueue(A, failing(WHOLE[:2], FAILURES[how]))
    upstream.enqueue(B, text_stream(["three, ", "four, ", "five."]))
    text, chunks = read(gw)
    assert text == "".join(WHOLE)
    assert {c.id for c in chunks} == {"chatcmpl-up"}  # one answer: the first stream's id throughout
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    sent = upstream.bodies(B)[0]["messages"]
    assert sent[:-1] == MESSAGES and sent[-1] == {"role": "assistant", "content": "One, two,"}  # no trailing space
    assert gw.sample("llm_gateway_continuations_total", deployment="b/model-b", mode="prefill", outcome="ok") == 1
    assert gw.sample("llm_gateway_stream_failures_total", deployment="a/model-a") == 1


def test_the_whitespace_a_prefill_left_out_is_not_written_twice(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))
    upstream.enqueue(B, text_stream([" three, four, five."]))  # the model writes the space again
    assert read(gw)[0] == "".join(WHOLE)


def test_a_deployment_that_rejects_prefill_regenerates_and_learns_it(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    rejection = error_script(400, "invalid_request_error", "assistant prefill is not supported")
    upstream.enqueue(A, failing(WHOLE[:2], Close()), failing(WHOLE[:3], INBAND))
    upstream.enqueue(B, rejection, text_stream(["One, tw", "o, three, ", "four, five."]),
                     text_stream(WHOLE))
    text, _ = read(gw)
    assert text == "".join(WHOLE)  # the 400 never reached the client
    bodies = upstream.bodies(B)
    assert bodies[0]["messages"][-1]["role"] == "assistant" and bodies[1]["messages"] == MESSAGES
    assert gw.sample("llm_gateway_learned_fallbacks", deployment="b/model-b", fact="no_prefill") == 1
    assert gw.sample("llm_gateway_continuations_total", mode="prefill", outcome="failed") == 1
    assert gw.sample("llm_gateway_continuations_total", mode="regenerate", outcome="ok") == 1
    assert read(gw)[0] == "".join(WHOLE)  # learned: straight to regenerate
    assert upstream.bodies(B)[2]["messages"] == MESSAGES and len(upstream.bodies(B)) == 3


@pytest.mark.parametrize("how", sorted(FAILURES))
def test_a_deterministic_fallback_that_cannot_prefill_regenerates(
        how: str, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, b_prefill=False, idle_s=0.3 if how == "stall" else 5))
    upstream.enqueue(A, failing(WHOLE[:3], FAILURES[how]))
    upstream.enqueue(B, text_stream(WHOLE))
    text, chunks = read(gw)
    assert text == "".join(WHOLE) and {c.id for c in chunks} == {"chatcmpl-up"}
    assert upstream.bodies(B)[0]["messages"] == MESSAGES


def raw_stream(gw: GatewayServer) -> bytes:
    req = urllib.request.Request(f"{gw.base_url}/chat/completions", headers={"content-type": "application/json"},
                                 data=orjson.dumps({"model": "m", "stream": True, "messages": MESSAGES}))
    with urllib.request.urlopen(req, timeout=30) as r:
        return bytes(r.read())


@pytest.mark.parametrize("how", sorted(FAILURES))
def test_a_regenerated_answer_that_diverges_ends_with_one_error_event(
        how: str, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, b_prefill=False, idle_s=0.3 if how == "stall" else 5))
    upstream.enqueue(A, failing(WHOLE[:2], FAILURES[how]))
    upstream.enqueue(B, text_stream(["One, ", "TWO, three."]))
    body = raw_stream(gw)
    assert body.count(b'data: {"error"') == 1 and b"[DONE]" not in body and body.endswith(b"\n\n")
    assert b"TWO" not in body and b"three" not in body  # nothing of the other answer
    upstream.enqueue(A, failing(WHOLE[:2], FAILURES[how]))
    upstream.enqueue(B, text_stream(["One, ", "TWO, three."]))
    seen: list[str] = []
    with pytest.raises(openai.APIError):
        for c in sdk(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True):
            seen.append(c.choices[0].delta.content or "" if c.choices else "")
    assert "".join(seen) == "One, two, "  # the text already sent stands
    assert gw.sample("llm_gateway_continuations_total", mode="regenerate", outcome="diverged") == 2


def test_an_anthropic_fallback_prefills_natively(upstream: FakeUpstream,
                                                 make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, b_prefill=None, b_type="anthropic"))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))
    upstream.enqueue("/b/v1/messages", a.stream([a.message_start(), *a.text_block(0, [" three, four, five."]),
                                                 a.message_delta(), a.message_stop()]))
    text, chunks = read(gw, stream_options={"include_usage": True})
    assert text == "".join(WHOLE)
    sent = upstream.bodies("/b/v1/messages")[0]["messages"]
    assert sent[-1]["role"] == "assistant" and "One, two," in orjson.dumps(sent[-1]).decode()
    usage = chunks[-1].usage  # the first attempt reported none: the second's (its output count is cumulative)
    assert usage is not None and usage.completion_tokens == a.USAGE_END["output_tokens"]
    start = a.USAGE_START
    assert usage.prompt_tokens == start["input_tokens"] + start["cache_read_input_tokens"]


def test_a_regenerated_answer_that_ends_early_diverges(upstream: FakeUpstream,
                                                       make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, b_prefill=False))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))
    upstream.enqueue(B, text_stream(["One, "]))
    with pytest.raises(openai.APIError):
        read(gw)
    assert gw.sample("llm_gateway_continuations_total", mode="regenerate", outcome="diverged") == 1


def test_a_failure_inside_a_tool_calls_arguments_is_never_continued(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":'}}
    upstream.enqueue(A, Script([ROLE, sse(chunk({"tool_calls": [call]})), Close()]))
    with pytest.raises(openai.APIError):
        read(gw)
    assert upstream.bodies(B) == []


def test_a_tool_call_in_the_continuation_reaches_the_client(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(A, failing(["Let me look"], Close()))
    call = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    upstream.enqueue(B, Script([ROLE, sse(chunk({"content": " it up."})), sse(chunk({"tool_calls": [call]})),
                                sse(chunk({}, "tool_calls")), b"data: [DONE]\n\n"]))
    text, chunks = read(gw)
    assert text == "Let me look it up."
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    got = [(tc.index, tc.id, tc.function.name, tc.function.arguments) for tc in calls]
    assert got == [(0, "call_9", "lookup", "{}")]


def test_the_usage_the_client_reads_and_the_usage_recorded_are_the_sum(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(A, failing(WHOLE[:2], Close(), usage=True))  # a server that reports usage on every chunk
    upstream.enqueue(B, text_stream(WHOLE[2:]))
    text, chunks = read(gw, stream_options={"include_usage": True})
    assert text == "".join(WHOLE)
    last = [c.usage for c in chunks if c.usage is not None][-1]  # the upstream's running counts came first
    assert last.prompt_tokens == FIRST_USAGE["prompt_tokens"] + USAGE["prompt_tokens"]
    assert last.completion_tokens == FIRST_USAGE["completion_tokens"] + USAGE["completion_tokens"]
    assert chunks[-1].usage is last and not chunks[-1].choices
    # each attempt's tokens against its own deployment's provider; the request's record is the sum
    assert gw.sample("llm_gateway_tokens_total", provider="a", type="input") == FIRST_USAGE["prompt_tokens"]
    assert gw.sample("llm_gateway_tokens_total", provider="b", type="input") == USAGE["prompt_tokens"]


def test_the_usage_recorded_for_the_request_is_the_sum(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(A, failing(WHOLE[:2], Close(), usage=True))
    upstream.enqueue(B, text_stream(WHOLE[2:]))
    with capture_logs() as logs:
        assert read(gw)[0] == "".join(WHOLE)
        servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs)))
    (line,) = [e for e in logs if e["event"] == "request"]
    assert line["input_tokens"] == FIRST_USAGE["prompt_tokens"] + USAGE["prompt_tokens"]
    # the first attempt was cut: its count so far is a floor, raised to the estimate of the 10 bytes it
    # sent (3 tokens), as a cut stream's is (docs/extensions.md, "A stream without usage")
    assert line["output_tokens"] == 3 + USAGE["completion_tokens"] and line["estimated"] is True
    assert line["continued"] == "prefill:ok" and line["stream_error"] is None and line["attempts"] == 2


def tokens_of(text: str | bytes) -> int:
    """The gateway's estimate: a token per 4 UTF-8 bytes, rounded up."""
    return -(-len(text.encode() if isinstance(text, str) else text) // 4)


@pytest.mark.parametrize("second", ["whole", "cut too"])
def test_an_attempt_cut_before_its_usage_is_charged_an_estimate(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], second: str) -> None:
    """Most OpenAI-compatible streams report their usage at the end: a leg cut before it is charged the
    estimate of its prompt (a prefill's text so far included) and of what it sent, each leg its own."""
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))  # "One, two, ", no usage
    upstream.enqueue(B, text_stream(WHOLE[2:]) if second == "whole" else failing(["three, "], Close()))
    with capture_logs() as logs:
        if second == "whole":
            assert read(gw)[0] == "".join(WHOLE)
        else:
            with pytest.raises(openai.APIError):
                read(gw)
        servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs)))
    (line,) = [e for e in logs if e["event"] == "request"]
    prompt = tokens_of(orjson.dumps(MESSAGES))
    first = (prompt, tokens_of("One, two, "))
    prefilled = tokens_of(orjson.dumps(MESSAGES) + b"One, two,")  # the prefill's prompt: the text so far too
    reported = (USAGE["prompt_tokens"], USAGE["completion_tokens"])
    after = reported if second == "whole" else (prefilled, tokens_of("three, "))
    assert (line["input_tokens"], line["output_tokens"]) == (first[0] + after[0], first[1] + after[1])
    assert line["estimated"] is True and line["continued"] == ("prefill:ok" if second == "whole" else "prefill:failed")
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="input") == first[0]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="a", type="output") == first[1]
    assert gw.sample("llm_gateway_estimated_tokens_total", provider="b") == (0 if second == "whole" else sum(after))
    assert gw.sample("llm_gateway_tokens_total", provider="b", type="input") == (after[0] if second == "whole" else 0)


def test_a_secret_split_by_the_failure_is_masked_whole(upstream: FakeUpstream,
                                                       make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, redaction="default"))
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0L1m2N3p4"
    upstream.enqueue(A, failing(["The key is ", secret[:12]], Close()))
    upstream.enqueue(B, text_stream([secret[12:] + " and that is all."]))
    text, _ = read(gw)
    assert secret[:6] not in text and "[REDACTED:" in text and text.endswith(" and that is all.")


def test_without_continuation_a_cut_ends_with_one_error_event(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, continuation=False))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))
    with pytest.raises(openai.APIError):
        read(gw)
    assert upstream.bodies(B) == []


def test_no_attempt_left_ends_the_stream_as_before(upstream: FakeUpstream,
                                                   make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, max_attempts=1))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))
    with pytest.raises(openai.APIError):
        read(gw)
    assert upstream.bodies(B) == []


def test_a_continuation_that_fails_too_ends_with_one_error_event(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))
    upstream.enqueue(B, Script([ROLE, sse(chunk({"content": " three,"})), Close()]))
    seen: list[str] = []
    with pytest.raises(openai.APIError):
        for c in sdk(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True):
            seen.append(c.choices[0].delta.content or "" if c.choices else "")
    assert "".join(seen) == "One, two, three,"
    assert gw.sample("llm_gateway_continuations_total", mode="prefill", outcome="failed") == 1



def test_the_continuation_metric_is_the_contracts(upstream: FakeUpstream,
                                                  make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, b_prefill=False))
    upstream.enqueue(A, failing(WHOLE[:2], Close()))
    upstream.enqueue(B, text_stream(["Other."]))
    with pytest.raises(openai.APIError):
        read(gw)
    families = {f.name: f for f in text_string_to_metric_families(gw.scrape())}
    for name, spec in CONTINUATION_METRICS.items():
        samples = [s for s in families[name.removesuffix("_total")].samples if not s.name.endswith("_created")]
        assert {s.labels["mode"] for s in samples} == {"prefill", "regenerate"}, "every mode from the start"
        for s in samples:
            assert set(s.labels) == set(spec.labels)
            assert s.labels["model"] == "m" and s.labels["deployment"] in {"a/model-a", "b/model-b"}
            for label, allowed in spec.values.items():
                assert s.labels[label] in allowed
        assert any(s.labels["outcome"] == "diverged" and s.value == 1 for s in samples)
