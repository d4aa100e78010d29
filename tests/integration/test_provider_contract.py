"""One contract, every provider type: identical cases through the real gateway with the official `openai`
SDK, each provider type speaking its own scripted dialect (OpenAI, Azure OpenAI, Anthropic Messages) or
the built-in mock. The client must not be able to tell them apart.

The test ids name the provider type (`test_text[anthropic]`), so pytest's output is the support matrix;
a case a provider type cannot be scripted for is not generated for it.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import openai
import orjson
import pytest

from gateway.providers.demo import ANSWER
from tests import anthropic_scripts as a
from tests.chat_scripts import MODEL, chunk, usage_chunk
from tests.fake_upstream import FakeUpstream, Script, json_script, sse
from tests.harness import GatewayServer, LoopThread, wait_until

MESSAGES = [{"role": "user", "content": "Say hello"}]
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
# the canonical usage every scripted dialect reports, each in its own terms
PROMPT, CACHED, COMPLETION = 30, 10, 12
OPENAI_USAGE = {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION, "total_tokens": PROMPT + COMPLETION,
                "prompt_tokens_details": {"cached_tokens": CACHED},
                "completion_tokens_details": {"reasoning_tokens": 0}}
ANTHROPIC_START = {"input_tokens": PROMPT - CACHED, "cache_read_input_tokens": CACHED,
                   "cache_creation_input_tokens": 0, "output_tokens": 1}
ANTHROPIC_END = {"output_tokens": COMPLETION}
TOOL_CALLS = [("call_a", "weather", ['{"city":', '"Oslo"}']), ("call_b", "clock", ['{"tz":"UTC"}'])]
INBAND_ERROR = {"error": {"message": "The server had an error", "type": "server_error", "param": None, "code": None}}


class OpenAIDialect:
    type = "openai"
    cases = frozenset({"text", "usage", "tools", "reasoning", "error_before", "error_after", "non_stream"})

    def provider(self, up: FakeUpstream) -> dict[str, Any]:
        return {"type": "openai", "base_url": f"{up.base_url}/v1", "api_key": "sk-upstream-SECRET"}

    def path(self, model: str) -> str:
        return "/v1/chat/completions"

    def _stream(self, deltas: list[dict[str, Any]], finish: str | None, usage: bool = True) -> Script:
        parts = [sse(c) for c in self._preamble()]
        parts += [sse(chunk({"role": "assistant", "content": ""}))] + [sse(chunk(d)) for d in deltas]
        if finish:
            parts.append(sse(chunk({}, finish)))
            if usage:
                parts += [sse(usage_chunk(OPENAI_USAGE)), b"data: [DONE]\n\n"]
        return Script(parts)

    def _preamble(self) -> list[dict[str, Any]]:
        return []

    def text(self, pieces: list[str]) -> Script:
        return self._stream([{"content": p} for p in pieces], "stop")

    def tools(self) -> Script:
        deltas = []
        for n, (cid, name, args) in enumerate(TOOL_CALLS):
            deltas.append({"tool_calls": [{"index": n, "id": cid, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]})
            deltas += [{"tool_calls": [{"index": n, "function": {"arguments": p}}]} for p in args]
        return self._stream(deltas, "tool_calls")

    def reasoning(self, thinking: list[str], answer: list[str]) -> Script:
        return self._stream([{"reasoning_content": t} for t in thinking] + [{"content": p} for p in answer], "stop")

    def error_before_token(self) -> Script:
        script = self._stream([], None)
        script.parts.append(sse(INBAND_ERROR))
        return script

    def error_after_token(self, pieces: list[str]) -> Script:
        script = self._stream([{"content": p} for p in pieces], None)
        script.parts.append(sse(INBAND_ERROR))
        return script

    def body(self, text: str) -> Script:
        return json_script({"id": "chatcmpl-body", "object": "chat.completion", "created": 1, "model": MODEL,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "finish_reason": "stop", "logprobs": None}],
                            "usage": OPENAI_USAGE, **self._body_extra()})

    def _body_extra(self) -> dict[str, Any]:
        return {}


class AzureDialect(OpenAIDialect):
    """OpenAI's format with a prompt-filter chunk first and content-filter results on every choice."""

    type = "azure"
    FILTER = [{"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False, "severity": "safe"}}}]

    def provider(self, up: FakeUpstream) -> dict[str, Any]:
        return {"type": "azure", "base_url": up.base_url, "api_key": "azure-SECRET", "api_version": "2024-10-21"}

    def path(self, model: str) -> str:
        return f"/openai/deployments/{model}/chat/completions"

    def _preamble(self) -> list[dict[str, Any]]:
        return [{"choices": [], "created": 0, "id": "", "model": "", "object": "",
                 "prompt_filter_results": self.FILTER}]

    def _body_extra(self) -> dict[str, Any]:
        return {"prompt_filter_results": self.FILTER}


class AnthropicDialect:
    type = "anthropic"
    cases = OpenAIDialect.cases

    def provider(self, up: FakeUpstream) -> dict[str, Any]:
        return {"type": "anthropic", "base_url": up.base_url, "api_key": "sk-ant-SECRET"}

    def path(self, model: str) -> str:
        return a.PATH

    def _stream(self, blocks: list[dict[str, Any]], stop: str | None, error: bool = False) -> Script:
        events = [a.message_start(usage=ANTHROPIC_START), a.ping(), *blocks]
        if error:
            events.append(a.error_event("overloaded_error"))
        if stop:
            events += [a.message_delta(stop, ANTHROPIC_END), a.message_stop()]
        return a.stream(events)

    def text(self, pieces: list[str]) -> Script:
        return self._stream(a.text_block(0, pieces), "end_turn")

    def tools(self) -> Script:
        blocks = [e for n, (cid, name, args) in enumerate(TOOL_CALLS) for e in a.tool_block(n, cid, name, args)]
        return self._stream(blocks, "tool_use")

    def reasoning(self, thinking: list[str], answer: list[str]) -> Script:
        return self._stream([*a.thinking_block(0, thinking), *a.text_block(1, answer)], "end_turn")

    def error_before_token(self) -> Script:
        return self._stream([a.text_block(0, [])[0]], None, error=True)

    def error_after_token(self, pieces: list[str]) -> Script:
        return self._stream(a.text_block(0, pieces)[:-1], None, error=True)

    def body(self, text: str) -> Script:
        return a.message_body([{"type": "text", "text": text}], usage={**ANTHROPIC_START, **ANTHROPIC_END})


class MockDialect:
    """The built-in mock: nothing to script; it always gives its demo answer and real usage."""

    type = "mock"
    cases = frozenset({"text", "usage", "non_stream"})

    def provider(self, up: FakeUpstream) -> dict[str, Any]:
        return {"type": "mock", "ttft_ms": 0, "token_delay_ms": 0}


Dialect = OpenAIDialect | AnthropicDialect | MockDialect
DIALECTS = [OpenAIDialect(), AzureDialect(), AnthropicDialect(), MockDialect()]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each case runs for every provider type that can be scripted for it (the mock only gives its demo
    answer), so the test ids are the support matrix: `test_tools[anthropic]`, ..."""
    if "dialect" in metafunc.fixturenames:
        case = metafunc.function.__name__.removeprefix("test_")
        supported = [d for d in DIALECTS if case in d.cases]
        metafunc.parametrize("dialect", supported, ids=[d.type for d in supported])


@pytest.fixture
def gw(dialect: Dialect, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    retry = {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}
    return make_gateway(
        providers={"up": {**dialect.provider(upstream), "timeouts": TIMEOUTS}},
        models=[{"name": "m", "deployments": [{"provider": "up", "model": "primary"}], "retry": retry},
                {"name": "m2", "retry": retry, "deployments": [{"provider": "up", "model": "primary"},
                                                               {"provider": "up", "model": "secondary"}]}])


def enqueue(up: FakeUpstream, d: Any, model: str, script: Script) -> None:
    up.enqueue(d.path(model), script)


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="client-key-123", max_retries=0, timeout=20)


def stream(gw: GatewayServer, model: str = "m", **kw: Any) -> list[Any]:
    return list(client(gw).chat.completions.create(model=model, messages=MESSAGES, stream=True, **kw))


def text_of(chunks: list[Any], field: str = "content") -> str:
    return "".join(getattr(c.choices[0].delta, field, None) or "" for c in chunks if c.choices)


def role_chunks(chunks: list[Any]) -> int:
    return sum(1 for c in chunks if c.choices and c.choices[0].delta.role)


def test_text(dialect: Dialect, upstream: FakeUpstream, gw: GatewayServer) -> None:
    pieces = ["Hel", "lo, ", "world"]
    if not isinstance(dialect, MockDialect):
        enqueue(upstream, dialect, "primary", dialect.text(pieces))
    chunks = stream(gw)
    assert text_of(chunks) == (ANSWER if isinstance(dialect, MockDialect) else "".join(pieces))
    assert role_chunks(chunks) == 1 and chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.choices for c in chunks), "no usage chunk the client did not ask for"
    assert len({c.id for c in chunks}) == 1 and all(c.id and c.model for c in chunks)


def tokens_counted(servers: LoopThread, gw: GatewayServer, kind: str, expected: float) -> None:
    """The stream's usage is recorded just after its last byte: wait (bounded) for the counter."""
    servers.run(wait_until(lambda: gw.sample("llm_gateway_tokens_total", model="m", provider="up", type=kind)
                           == expected))


def test_usage(dialect: Dialect, servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    if not isinstance(dialect, MockDialect):
        enqueue(upstream, dialect, "primary", dialect.text(["a", "b"]))
    chunks = stream(gw, stream_options={"include_usage": True})
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and chunks[-1].choices == [] and chunks[-1].usage is usages[0]
    u = usages[0]
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    tokens_counted(servers, gw, "input", u.prompt_tokens)
    tokens_counted(servers, gw, "output", u.completion_tokens)
    if not isinstance(dialect, MockDialect):
        assert (u.prompt_tokens, u.completion_tokens) == (PROMPT, COMPLETION)
        assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens == CACHED
        tokens_counted(servers, gw, "cached_input", CACHED)


def test_tools(dialect: Any, upstream: FakeUpstream, gw: GatewayServer) -> None:
    enqueue(upstream, dialect, "primary", dialect.tools())
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
             for n in ("weather", "clock")]
    with client(gw).chat.completions.stream(model="m", messages=MESSAGES, tools=tools) as s:
        final = s.get_final_completion()
    got = [(t.id, t.function.name, t.function.arguments) for t in final.choices[0].message.tool_calls or []]
    assert got == [(cid, name, "".join(args)) for cid, name, args in TOOL_CALLS]
    assert final.choices[0].finish_reason == "tool_calls"


def test_reasoning(dialect: Any, upstream: FakeUpstream, gw: GatewayServer) -> None:
    enqueue(upstream, dialect, "primary", dialect.reasoning(["First, ", "think."], ["Then ", "answer."]))
    chunks = stream(gw, reasoning_effort="low")
    assert text_of(chunks, "reasoning_content") == "First, think."
    assert text_of(chunks) == "Then answer."
    reasoning_at = [i for i, c in enumerate(chunks) if c.choices and getattr(c.choices[0].delta, "reasoning_content",
                                                                             None)]
    content_at = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content]
    assert max(reasoning_at) < min(content_at)


def test_error_before(dialect: Any, upstream: FakeUpstream, gw: GatewayServer) -> None:
    """An in-band error before the first token: the second deployment answers, invisibly."""
    enqueue(upstream, dialect, "primary", dialect.error_before_token())
    enqueue(upstream, dialect, "secondary", dialect.text(["Second ", "deployment"]))
    with client(gw).chat.completions.with_streaming_response.create(model="m2", messages=MESSAGES,
                                                                    stream=True) as raw:
        assert raw.headers["x-gateway-deployment"] == "up/secondary"
        assert raw.headers["x-gateway-attempts"] == "2"
        chunks = list(raw.parse())
    assert role_chunks(chunks) == 1, "the failed attempt's preamble never reached the client"
    assert text_of(chunks) == "Second deployment"
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m2", deployment="up/primary",
                     outcome="inband_error") == 1


def test_error_after(dialect: Any, upstream: FakeUpstream, gw: GatewayServer) -> None:
    """An in-band error after the first token: one error event, no [DONE]; the text sent stands."""
    enqueue(upstream, dialect, "primary", dialect.error_after_token(["Partial ", "text"]))
    enqueue(upstream, dialect, "primary", dialect.error_after_token(["Partial ", "text"]))
    seen: list[Any] = []
    with pytest.raises(openai.APIError):
        for c in client(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True):
            seen.append(c)
    assert text_of(seen) == "Partial text" and role_chunks(seen) == 1
    req = urllib.request.Request(f"{gw.base_url}/chat/completions", headers={"content-type": "application/json"},
                                 data=orjson.dumps({"model": "m", "messages": MESSAGES, "stream": True}))
    with urllib.request.urlopen(req, timeout=20) as resp:
        events = [e for e in resp.read().split(b"\n\n") if e.strip()]
    assert b"[DONE]" not in events[-1]
    errors = [e for e in events if b'"error"' in e]
    assert errors == [events[-1]] and orjson.loads(events[-1].removeprefix(b"data: "))["error"]["message"]
    assert len(upstream.received) == 2, "nothing is retried after the first token"


def test_non_stream(dialect: Dialect, upstream: FakeUpstream, gw: GatewayServer) -> None:
    if not isinstance(dialect, MockDialect):
        enqueue(upstream, dialect, "primary", dialect.body("Plain answer"))
    body = client(gw).chat.completions.create(model="m", messages=MESSAGES)
    assert body.object == "chat.completion" and body.id and body.model
    assert body.choices[0].message.content == (ANSWER if isinstance(dialect, MockDialect) else "Plain answer")
    assert body.choices[0].finish_reason == "stop"
    assert body.usage is not None
    assert gw.sample("llm_gateway_tokens_total", model="m", provider="up", type="input") == body.usage.prompt_tokens
    if not isinstance(dialect, MockDialect):
        assert (body.usage.prompt_tokens, body.usage.completion_tokens) == (PROMPT, COMPLETION)
