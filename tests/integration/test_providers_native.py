"""Native providers through the real gateway, driven by the official `openai` SDK: an Anthropic-dialect
and an Azure-dialect scripted upstream on 127.0.0.1. Clients only ever see OpenAI shapes."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import openai
import orjson
import pytest

from tests import anthropic_scripts as a
from tests.chat_scripts import chunk, text_stream, usage_chunk
from tests.fake_upstream import FakeUpstream, Script, json_script, sse
from tests.harness import GatewayServer, LoopThread, wait_until

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
FAST_RETRY = {"max_attempts": 4, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}
AZURE_PATH = "/openai/deployments/gpt4o-eu/chat/completions"
OPENAI_PATH = "/v1/chat/completions"


def providers(up: FakeUpstream) -> dict[str, Any]:
    return {
        "claude": {"type": "anthropic", "base_url": up.base_url, "api_key": "sk-ant-upstream-SECRET",
                   "timeouts": TIMEOUTS},
        "az": {"type": "azure", "base_url": up.base_url, "api_key": "azure-upstream-SECRET",
               "api_version": "2024-10-21", "timeouts": TIMEOUTS},
        "oai": {"type": "openai", "base_url": f"{up.base_url}/v1", "api_key": "sk-upstream-SECRET",
                "timeouts": TIMEOUTS},
    }


MODELS = [
    {"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}],
     "retry": {**FAST_RETRY, "per_deployment": 2}},
    {"name": "azure", "deployments": [{"provider": "az", "model": "gpt4o-eu"}],
     "retry": {**FAST_RETRY, "per_deployment": 2}},
    {"name": "claude-then-openai", "retry": FAST_RETRY,
     "deployments": [{"provider": "claude", "model": "claude-dep"}, {"provider": "oai", "model": "gpt-dep"}]},
]


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(providers=providers(upstream), models=MODELS)


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="client-key-123", max_retries=0, timeout=20)


def content(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def roles(chunks: list[Any]) -> int:
    return sum(1 for c in chunks if c.choices and c.choices[0].delta.role)


# --- Anthropic ------------------------------------------------------------------------------------


def test_anthropic_text_stream_and_the_translated_request(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.text_stream(["Hel", "lo", " there"], split=7))
    with client(gw).chat.completions.with_streaming_response.create(
            model="claude", messages=MESSAGES, stream=True, temperature=0.3, n=1, seed=3) as raw:
        assert raw.headers["x-gateway-deployment"] == "claude/claude-dep"
        chunks = list(raw.parse())
    assert content(chunks) == "Hello there"
    assert roles(chunks) == 1 and chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {"msg_01"} and {c.model for c in chunks} == {a.MODEL}
    assert all(c.choices for c in chunks), "no usage chunk the client did not ask for"
    assert chunks[-1].choices[0].finish_reason == "stop"
    got = upstream.received[0]
    assert got.headers["x-api-key"] == "sk-ant-upstream-SECRET"
    assert got.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in got.headers and "client-key-123" not in str(got.headers)
    assert got.body == {"model": "claude-dep", "system": [{"type": "text", "text": "Be brief."}],
                        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}],
                        "max_tokens": 4096, "temperature": 0.3, "stream": True}


def test_anthropic_thinking_becomes_reasoning_content(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start(), *a.thinking_block(0, ["Hmm, ", "greet."]),
                                       *a.text_block(1, ["Hi!"]), a.message_delta(), a.message_stop()]))
    chunks = list(client(gw).chat.completions.create(model="claude", messages=MESSAGES, stream=True,
                                                     reasoning_effort="medium", max_completion_tokens=500))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert reasoning == "Hmm, greet." and content(chunks) == "Hi!"
    sent = upstream.bodies(a.PATH)[0]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 8192} and sent["max_tokens"] == 8692


def test_anthropic_parallel_tool_calls_with_the_sdk_stream_helper(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([
        a.message_start(), *a.text_block(0, ["Checking both."]),
        *a.tool_block(1, "toolu_A", "weather", ['{"city": ', '"Oslo"}']),
        *a.tool_block(2, "toolu_B", "weather", ['{"city": "Paris"}']),
        a.message_delta("tool_use"), a.message_stop()], split=11))
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    with client(gw).chat.completions.stream(model="claude", messages=MESSAGES, tools=tools) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking both."
    got = [(t.id, t.function.name, t.function.arguments) for t in choice.message.tool_calls or []]
    assert got == [("toolu_A", "weather", '{"city": "Oslo"}'), ("toolu_B", "weather", '{"city": "Paris"}')]
    assert upstream.bodies(a.PATH)[0]["tools"][0]["input_schema"]["required"] == ["city"]


def test_anthropic_tool_loop_request_is_translated(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.text_stream(["Oslo: 12C."]))
    call = {"id": "toolu_A", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "toolu_A", "content": "12C"}]
    chunks = list(client(gw).chat.completions.create(model="claude", messages=history, stream=True))  # type: ignore[arg-type]
    assert content(chunks) == "Oslo: 12C."
    turns = upstream.bodies(a.PATH)[0]["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [{"type": "tool_use", "id": "toolu_A", "name": "weather", "input": {"city": "Oslo"}}]
    assert turns[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "12C"}]


def tokens_counted(servers: LoopThread, gw: GatewayServer, model: str, provider: str, kind: str, n: float) -> None:
    """A stream's usage is recorded just after its last byte: wait (bounded) for the counter."""
    servers.run(wait_until(lambda: gw.sample("llm_gateway_tokens_total", model=model, provider=provider,
                                             type=kind) == n))


def test_anthropic_usage_with_cache_counts(servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    start = {"input_tokens": 20, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 5, "output_tokens": 1}
    upstream.enqueue(a.PATH, a.text_stream(["a", "b"], usage_start=start, usage_end={"output_tokens": 12}))
    chunks = list(client(gw).chat.completions.create(model="claude", messages=MESSAGES, stream=True,
                                                     stream_options={"include_usage": True}))
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and chunks[-1].usage is usages[0] and chunks[-1].choices == []
    u = usages[0]
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (35, 12, 47)
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens == 10
    for kind, n in (("input", 35), ("cached_input", 10), ("cache_creation_input", 5), ("output", 12)):
        tokens_counted(servers, gw, "claude", "claude", kind, n)


@pytest.mark.parametrize(("stop", "finish"), [("max_tokens", "length"), ("stop_sequence", "stop"),
                                              ("end_turn", "stop"), ("refusal", "content_filter")])
def test_anthropic_stop_reasons(upstream: FakeUpstream, gw: GatewayServer, stop: str, finish: str) -> None:
    pieces = [] if stop == "refusal" else ["partial"]
    upstream.enqueue(a.PATH, a.text_stream(pieces, stop=stop))
    final = _final_completion(client(gw), model="claude", messages=MESSAGES, stop=["END"])
    assert final.choices[0].finish_reason == finish
    assert (final.choices[0].message.content or "") == "".join(pieces)
    assert upstream.bodies(a.PATH)[0]["stop_sequences"] == ["END"]


def _final_completion(c: openai.OpenAI, **kw: Any) -> Any:
    """The SDK helper's final message; it raises on `length` and `content_filter` but carries it."""
    try:
        with c.chat.completions.stream(**kw) as stream:
            return stream.get_final_completion()
    except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as err:
        return err.completion


def test_anthropic_non_stream(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.message_body([
        {"type": "thinking", "thinking": "Plan.", "signature": "sig"}, {"type": "text", "text": "Calling."},
        {"type": "tool_use", "id": "toolu_1", "name": "clock", "input": {"tz": "UTC"}}], stop="tool_use",
        usage={"input_tokens": 4, "cache_read_input_tokens": 6, "cache_creation_input_tokens": 2, "output_tokens": 9}))
    body = client(gw).chat.completions.create(model="claude", messages=MESSAGES)
    msg = body.choices[0].message
    assert body.object == "chat.completion" and body.id == "msg_body" and body.model == a.MODEL
    assert msg.content == "Calling." and getattr(msg, "reasoning_content", None) == "Plan."
    assert [(t.id, t.function.arguments) for t in msg.tool_calls or []] == [("toolu_1", '{"tz":"UTC"}')]
    assert body.choices[0].finish_reason == "tool_calls"
    assert body.usage is not None and (body.usage.prompt_tokens, body.usage.completion_tokens) == (12, 9)
    assert "stream" not in upstream.bodies(a.PATH)[0]
    for kind, n in (("input", 12), ("cached_input", 6), ("cache_creation_input", 2), ("output", 9)):
        assert gw.sample("llm_gateway_tokens_total", model="claude", provider="claude", type=kind) == n, kind


def test_anthropic_invalid_request_passes_through(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.error_body(400, "invalid_request_error", "max_tokens: 999999 > 64000"))
    with pytest.raises(openai.BadRequestError) as info:
        client(gw).chat.completions.create(model="claude", messages=MESSAGES, stream=True, max_tokens=999999)
    assert info.value.status_code == 400 and "max_tokens: 999999 > 64000" in info.value.message
    assert len(upstream.received) == 1, "a client error is not retried"


def test_anthropic_overloaded_529_is_retried(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.error_body(529, "overloaded_error", "Overloaded", {"retry-after": "0"}),
                     a.text_stream(["after retry"]))
    chunks = list(client(gw).chat.completions.create(model="claude", messages=MESSAGES, stream=True))
    assert content(chunks) == "after retry" and roles(chunks) == 1
    assert len(upstream.received) == 2


def test_anthropic_overloaded_after_message_start_falls_back_to_openai_invisibly(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start("msg_failed"), a.ping(), a.text_block(0, [])[0],
                                       a.error_event("overloaded_error")]))
    upstream.enqueue(OPENAI_PATH, text_stream(["From ", "OpenAI."]))
    with client(gw).chat.completions.with_streaming_response.create(
            model="claude-then-openai", messages=MESSAGES, stream=True) as raw:
        assert raw.headers["x-gateway-deployment"] == "oai/gpt-dep"
        assert raw.headers["x-gateway-attempts"] == "2"
        chunks = list(raw.parse())
    assert roles(chunks) == 1, "exactly one role chunk: the failed attempt's preamble was dropped"
    assert content(chunks) == "From OpenAI."
    assert "msg_failed" not in {c.id for c in chunks}
    assert gw.sample("llm_gateway_upstream_attempts_total", model="claude-then-openai",
                     deployment="claude/claude-dep", outcome="inband_error") == 1
    assert upstream.bodies(OPENAI_PATH)[0]["messages"] == MESSAGES, "the OpenAI deployment gets the original request"


# --- Azure ----------------------------------------------------------------------------------------

FILTER = [{"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False, "severity": "safe"}}}]


def prompt_filter(marker: str) -> dict[str, Any]:
    return {"choices": [], "created": 0, "id": "", "model": "", "object": "",
            "prompt_filter_results": [{**FILTER[0], "marker": marker}]}


def azure_stream(pieces: list[str], marker: str = "good", finish: str = "stop", tail: list[bytes] | None = None,
                 ) -> Script:
    cfr = {"content_filter_results": {}}
    parts = [sse(prompt_filter(marker)), sse(chunk({"role": "assistant", "content": ""}, **cfr))]
    parts += [sse(chunk({"content": p})) for p in pieces]
    parts += [sse(chunk({}, finish)), *(tail or []), sse(usage_chunk()), b"data: [DONE]\n\n"]
    return Script(parts)


def raw_events(gw: GatewayServer, model: str, **extra: Any) -> list[dict[str, Any]]:
    """The client's view byte for byte: every `data:` event, parsed, up to [DONE]."""
    body = {"model": model, "messages": MESSAGES, "stream": True, **extra}
    req = urllib.request.Request(f"{gw.base_url}/chat/completions", data=orjson.dumps(body),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        data = resp.read()
    out = []
    for block in data.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                out.append(orjson.loads(line[6:]))
    return out


def test_azure_request_url_headers_and_api_version(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(AZURE_PATH, azure_stream(["Hi"]))
    chunks = list(client(gw).chat.completions.create(model="azure", messages=MESSAGES, stream=True))
    assert content(chunks) == "Hi"
    got = upstream.received[0]
    assert got.path == AZURE_PATH and got.query == {"api-version": "2024-10-21"}
    assert got.headers["api-key"] == "azure-upstream-SECRET"
    assert "Authorization" not in got.headers and "client-key-123" not in str(got.headers)
    assert "model" not in got.body and got.body["stream_options"] == {"include_usage": True}


def test_azure_prompt_filter_chunk_never_precedes_the_role_chunk(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(AZURE_PATH, azure_stream(["Hel", "lo"]))
    events = raw_events(gw, "azure", stream_options={"include_usage": True})
    first = events[0]
    assert first["choices"][0]["delta"]["role"] == "assistant" and first["id"] == "chatcmpl-up"
    assert first["prompt_filter_results"][0]["marker"] == "good"
    assert all(e["id"] and e["object"] == "chat.completion.chunk" for e in events)
    assert sum("prompt_filter_results" in e for e in events) == 1
    assert events[-1]["choices"] == [] and events[-1]["usage"]["prompt_tokens"] == 11


def test_azure_retry_shows_only_the_winning_attempts_preamble(upstream: FakeUpstream, gw: GatewayServer) -> None:
    failing = Script([sse(prompt_filter("failed")), sse(chunk({"role": "assistant", "content": ""})),
                      sse({"error": {"message": "The server had an error", "type": "server_error", "param": None,
                                     "code": None}})])
    upstream.enqueue(AZURE_PATH, failing, azure_stream(["Second ", "try"]))
    events = raw_events(gw, "azure")
    markers = [r["marker"] for e in events for r in e.get("prompt_filter_results", [])]
    assert markers == ["good"], "the failed attempt's prompt-filter chunk never reached the client"
    assert sum(1 for e in events if e["choices"] and e["choices"][0]["delta"].get("role")) == 1
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == "Second try"
    assert len(upstream.received) == 2


def test_azure_content_filter_chunks_do_not_break_the_sdk(servers: LoopThread, upstream: FakeUpstream,
                                                         gw: GatewayServer) -> None:
    late_filter = sse({"id": "", "object": "", "created": 0, "model": "", "choices": [{
        "index": 0, "finish_reason": None, "content_filter_results": {"violence": {"filtered": True}},
        "content_filter_offsets": {"check_offset": 0, "start_offset": 0, "end_offset": 8}}]})
    upstream.enqueue(AZURE_PATH, azure_stream(["Partial"], finish="content_filter", tail=[late_filter]))
    final = _final_completion(client(gw), model="azure", messages=MESSAGES)
    assert final.id == "chatcmpl-up" and final.choices[0].message.content == "Partial"
    assert final.choices[0].finish_reason == "content_filter"
    tokens_counted(servers, gw, "azure", "az", "input", 11)


def test_embeddings_azure_deployment_path_and_anthropic_404(upstream: FakeUpstream,
                                                            make_gateway: Callable[..., GatewayServer]) -> None:
    upstream.enqueue("/openai/deployments/emb-eu/embeddings", json_script({
        "object": "list", "model": "text-embedding-3-small",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}],
        "usage": {"prompt_tokens": 2, "total_tokens": 2}}))
    emb = make_gateway(providers=providers(upstream), models=[
        {"name": "emb", "deployments": [{"provider": "az", "model": "emb-eu"}]},
        {"name": "claude-emb", "deployments": [{"provider": "claude", "model": "claude-dep"}]}])
    r = client(emb).embeddings.create(model="emb", input="hello world", encoding_format="float")
    assert r.data[0].embedding == [0.5, 0.25]
    got = upstream.received[-1]
    assert got.query == {"api-version": "2024-10-21"} and got.headers["api-key"] == "azure-upstream-SECRET"
    assert got.body == {"input": "hello world", "encoding_format": "float"}
    upstream.enqueue("/v1/embeddings", a.error_body(404, "not_found_error", "Not Found"))
    with pytest.raises(openai.NotFoundError):
        client(emb).embeddings.create(model="claude-emb", input="x")
