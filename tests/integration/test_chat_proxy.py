"""Chat Completions through the real gateway, driven by the official `openai` SDK (sync and async),
against a scripted upstream on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import openai
import orjson
import pytest

import gateway.upstream as upstream_module
from tests.chat_scripts import MODEL, chunk, completion, error_script, text_stream, usage_chunk
from tests.fake_upstream import Close, FakeUpstream, Hang, Pause, Script, json_script, sse
from tests.harness import GatewayServer, LoopThread, wait_until

PATH = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Say hello"}]


def client(gw: GatewayServer, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="client-key-123", max_retries=0, timeout=20, **kw)


def aclient(gw: GatewayServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key-123", max_retries=0, timeout=20)


def collect(stream: openai.Stream) -> tuple[str, list]:  # type: ignore[type-arg]
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_stream_text_sync_equals_upstream_and_rewrites_the_request(upstream: FakeUpstream,
                                                                   gateway: GatewayServer) -> None:
    pieces = ["Hel", "lo", ", wo", "rld!"]
    upstream.enqueue(PATH, text_stream(pieces))
    with client(gateway).chat.completions.with_streaming_response.create(
            model="m", messages=MESSAGES, stream=True, extra_body={"custom_field": {"x": 1}}) as raw:
        assert raw.headers["x-gateway-deployment"] == "up/up-model"
        assert raw.headers["x-gateway-attempts"] == "1"
        assert raw.headers["x-request-id"]
        text, chunks = collect(raw.parse())
    assert text == "".join(pieces)
    assert all(c.choices for c in chunks), "no usage-only chunk the client did not ask for"
    assert chunks[0].model == MODEL  # the serving deployment's model name
    sent = upstream.bodies(PATH)[0]
    assert sent["model"] == "up-model"
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["custom_field"] == {"x": 1}, "unknown fields pass through untouched"
    headers = upstream.received[0].headers
    assert headers["Authorization"] == "Bearer sk-upstream-SECRET"
    assert "client-key-123" not in str(headers)


@pytest.mark.parametrize("placement", ["separate", "finish"])
def test_usage_forwarded_only_when_asked_and_counted_either_way(upstream: FakeUpstream, gateway: GatewayServer,
                                                                placement: str) -> None:
    upstream.enqueue(PATH, text_stream(["a", "b"], usage=placement), text_stream(["a", "b"], usage=placement))
    _, chunks = collect(client(gateway).chat.completions.create(
        model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}))
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and usages[0].prompt_tokens == 11 and usages[0].completion_tokens == 7
    _, chunks = collect(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert all(c.choices for c in chunks)
    assert gateway.sample("llm_gateway_tokens_total", model="m", provider="up", type="input") == 22
    assert gateway.sample("llm_gateway_tokens_total", model="m", provider="up", type="cached_input") == 6
    assert gateway.sample("llm_gateway_tokens_total", model="m", provider="up", type="reasoning") == 4


def test_parallel_tool_calls_with_interleaved_fragments(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    calls = [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "clock", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"tz":"UTC"}'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
        chunk({}, "tool_calls"), usage_chunk(),
    ]
    upstream.enqueue(PATH, Script([sse(c) for c in calls] + [b"data: [DONE]\n\n"]))
    with client(gateway).chat.completions.stream(model="m", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    got = [(t.id, t.function.name, t.function.arguments) for t in final.choices[0].message.tool_calls or []]
    assert got == [("call_a", "weather", '{"city":"Oslo"}'), ("call_b", "clock", '{"tz":"UTC"}')]
    assert final.choices[0].finish_reason == "tool_calls"


def test_reasoning_deltas_pass_through(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    parts = [chunk({"role": "assistant", "reasoning_content": "Think"}), chunk({"reasoning_content": "ing."}),
             chunk({"content": "Answer"}), chunk({}, "stop"), usage_chunk()]
    upstream.enqueue(PATH, Script([sse(p) for p in parts] + [b"data: [DONE]\n\n"]))
    chunks = list(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks)
    assert reasoning == "Thinking."
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Answer"


def test_multibyte_utf8_split_across_writes(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    pieces = ["известни ", "日本語のテキスト", " 🙂🚀", " naïve café\u2028line"]
    upstream.enqueue(PATH, text_stream(pieces, split=3))
    text, _ = collect(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert text == "".join(pieces)


def test_stream_without_done_still_completes(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, text_stream(["no ", "done"], done=False))
    text, chunks = collect(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert text == "no done" and chunks[-1].choices[0].finish_reason == "stop"


def test_upstream_400_passes_through_with_its_reason(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, error_script(400, "content_policy_violation", "Your request was rejected"))
    with pytest.raises(openai.BadRequestError) as info:
        client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert info.value.status_code == 400
    assert info.value.code == "content_policy_violation"
    assert "rejected" in info.value.message
    assert len(upstream.received) == 1, "a client error is not retried"


def test_upstream_that_closes_before_any_token_is_a_gateway_error(upstream: FakeUpstream,
                                                                   make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(models=[{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}],
                               "retry": {"max_attempts": 2, "per_deployment": 2, "initial_backoff_ms": 1}}])
    role_then_close = Script([sse(chunk({"role": "assistant", "content": ""})), Close()])
    upstream.enqueue(PATH, role_then_close, Script([sse(chunk({"role": "assistant"}))]))
    with pytest.raises(openai.APIStatusError) as info:
        client(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_error"  # type: ignore[index]
    assert "127.0.0.1" not in info.value.message and "http" not in info.value.message
    assert len(upstream.received) == 2


def test_n_equals_two_keeps_choices_apart(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    parts = [chunk({"role": "assistant", "content": ""}, index=0), chunk({"role": "assistant", "content": ""}, index=1),
             chunk({"content": "A1"}, index=0), chunk({"content": "B1"}, index=1), chunk({"content": "A2"}, index=0),
             chunk({"content": "B2"}, index=1), chunk({}, "stop", index=0), chunk({}, "length", index=1)]
    upstream.enqueue(PATH, Script([sse(p) for p in parts] + [b"data: [DONE]\n\n"]))
    chunks = list(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True, n=2))
    by_index: dict[int, str] = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            by_index[ch.index] += ch.delta.content or ""
    assert by_index == {0: "A1A2", 1: "B1B2"}
    upstream.enqueue(PATH, completion("Hi", n=2))
    body = client(gateway).chat.completions.create(model="m", messages=MESSAGES, n=2)
    assert [c.message.content for c in body.choices] == ["Hi #0", "Hi #1"]


def test_non_stream_sync_and_async(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, completion("Plain answer"), completion("Async answer"))
    body = client(gateway).chat.completions.create(model="m", messages=MESSAGES)
    assert body.choices[0].message.content == "Plain answer" and body.usage and body.usage.prompt_tokens == 11
    assert "stream_options" not in upstream.bodies(PATH)[0]

    async def run() -> str | None:
        async with aclient(gateway) as c:
            r = await c.chat.completions.create(model="m", messages=MESSAGES)
            return r.choices[0].message.content

    assert asyncio.run(run()) == "Async answer"


def test_async_streaming(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, text_stream(["as", "ync"]))

    async def run() -> str:
        async with aclient(gateway) as c:
            stream = await c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            return "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])

    assert asyncio.run(run()) == "async"


def test_embeddings_pass_through_and_usage_recorded(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue("/v1/embeddings", json_script({
        "object": "list", "model": "emb", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}],
        "usage": {"prompt_tokens": 4, "total_tokens": 4}}))
    r = client(gateway).embeddings.create(model="m", input="hello world", encoding_format="float")
    assert r.data[0].embedding == [0.5, 0.25]
    assert upstream.bodies("/v1/embeddings")[0]["model"] == "up-model"
    assert gateway.sample("llm_gateway_tokens_total", model="m", provider="up", type="input") == 4


def test_client_disconnect_closes_upstream_within_a_second(servers: LoopThread, upstream: FakeUpstream,
                                                           gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, Script([sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "one"})),
                                   Hang()]))
    stream = client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    first = next(iter(stream))
    assert first.choices
    stream.close()  # the client goes away mid-stream
    servers.run(asyncio.wait_for(upstream.closed.wait(), 1.0))
    servers.run(wait_until(lambda: gateway.sample("llm_gateway_inflight_requests", api="chat") == 0))
    assert gateway.sample("llm_gateway_requests_total", api="chat", model="m", stream="true",
                          outcome="cancelled") == 1


def test_metrics_on_metrics_port_only_and_labels_from_config(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, text_stream(["x"]))
    collect(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    with pytest.raises(openai.NotFoundError) as info:
        client(gateway).chat.completions.create(model="attacker-chosen-model-name", messages=MESSAGES)
    assert info.value.body["code"] == "model_not_found"  # type: ignore[index]
    text = gateway.scrape()
    for name in ("llm_gateway_requests_total", "llm_gateway_request_duration_seconds_bucket",
                 "llm_gateway_time_to_first_token_seconds_bucket",
                 "llm_gateway_upstream_time_to_first_token_seconds_bucket", "llm_gateway_tokens_total",
                 "llm_gateway_inflight_requests", "llm_gateway_build_info"):
        assert name in text, name
    assert "attacker-chosen-model-name" not in text
    assert 'model="unknown"' in text
    assert gateway.sample("llm_gateway_time_to_first_token_seconds_count", api="chat", model="m", provider="up") == 1
    api = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway.port}", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        api.get("/metrics", cast_to=object)


def test_bad_requests_get_openai_shaped_errors(gateway: GatewayServer) -> None:
    import urllib.error
    import urllib.request

    def post(body: bytes) -> tuple[int, dict]:  # type: ignore[type-arg]
        req = urllib.request.Request(f"{gateway.base_url}/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, orjson.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, orjson.loads(e.read())

    assert post(b"{not json")[0] == 400
    status, body = post(b'{"messages": []}')
    assert status == 400 and body["error"]["param"] == "model" and body["error"]["code"] == "invalid_request"
    status, body = post(b'{"model": "m", "stream": "yes", "messages": []}')
    assert status == 400 and body["error"]["param"] == "stream"
    status, body = post(b"x" * (11 * 1024 * 1024))
    assert status == 413 and body["error"]["code"] == "request_too_large"


def test_upstream_connections_are_reused(servers: LoopThread, upstream: FakeUpstream,
                                         gateway: GatewayServer) -> None:
    for _ in range(5):  # the chunked terminator comes in a write of its own, after [DONE]
        upstream.enqueue(PATH, Script([*text_stream(["a", "b"]).parts, Pause(0.05)]))
        collect(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
        servers.run(wait_until(lambda: not upstream_module._FINISHING))  # the gateway drained the body
    upstream.enqueue(PATH, completion("body"))
    client(gateway).chat.completions.create(model="m", messages=MESSAGES)
    assert len({r.peer_port for r in upstream.received}) == 1, "one keep-alive connection served all six"
