"""Real clients through the real gateway to a real model server (llama.cpp, Gemma 3 270M).

Every answer is greedy (temperature 0) and seeded, so the text a client gets through the gateway must
equal what the same client gets from the model server directly, for the same request."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.e2e import clients
from tests.e2e.conftest import GATEWAY_KEY, MODEL, Ledger, Stack, chat_request
from tests.e2e.processes import LLAMA_MODEL_ALIAS

DIRECT_KEY = "unused"  # the llama server has no auth


def check_same(via: clients.Answer, direct: clients.Answer, streamed: bool) -> None:
    assert via.text.strip(), "an empty answer proves nothing"
    if streamed:
        assert via.deltas > 1, f"streamed token by token, not in one piece: {via}"
    assert via.text == direct.text
    assert via.finish_reason == direct.finish_reason


def test_python_sdk_sync_stream(stack: Stack, ledger: Ledger) -> None:
    body = chat_request("Write one short sentence about the sea.", stream=True)
    direct = clients.python_stream(clients.sdk(stack.llama_url, DIRECT_KEY), LLAMA_MODEL_ALIAS, body)
    via = clients.python_stream(clients.sdk(stack.gateway_url, GATEWAY_KEY), MODEL, body)
    ledger.record(MODEL, True, via.usage)
    check_same(via, direct, streamed=True)


def test_python_sdk_sync_non_stream_reports_the_servers_usage(stack: Stack, ledger: Ledger) -> None:
    body = chat_request("Name three colours.")
    direct = clients.python_complete(clients.sdk(stack.llama_url, DIRECT_KEY), LLAMA_MODEL_ALIAS, body)
    via = clients.python_complete(clients.sdk(stack.gateway_url, GATEWAY_KEY), MODEL, body)
    ledger.record(MODEL, False, via.usage)
    check_same(via, direct, streamed=False)
    assert via.usage is not None and direct.usage is not None
    assert (via.usage.prompt_tokens, via.usage.completion_tokens) == (
        direct.usage.prompt_tokens, direct.usage.completion_tokens)


async def test_python_sdk_async_stream_and_non_stream_queue_behind_each_other(
        stack: Stack, ledger: Ledger) -> None:
    """The server answers one request at a time: these four are sent together and queue there."""
    stream_body = chat_request("Tell me a fact about the moon.", stream=True)
    plain_body = chat_request("What is two plus two?")
    direct, gw = clients.async_sdk(stack.llama_url, DIRECT_KEY), clients.async_sdk(stack.gateway_url, GATEWAY_KEY)
    d_stream, v_stream, d_plain, v_plain = await asyncio.gather(
        clients.async_stream(direct, LLAMA_MODEL_ALIAS, stream_body),
        clients.async_stream(gw, MODEL, stream_body),
        clients.async_complete(direct, LLAMA_MODEL_ALIAS, plain_body),
        clients.async_complete(gw, MODEL, plain_body))
    ledger.record(MODEL, True, v_stream.usage)
    ledger.record(MODEL, False, v_plain.usage)
    check_same(v_stream, d_stream, streamed=True)
    check_same(v_plain, d_plain, streamed=False)


def test_node_sdk_stream(stack: Stack, ledger: Ledger) -> None:
    body = chat_request("Describe a cat in one sentence.", stream=True)
    direct = clients.node_stream(stack.llama_url, DIRECT_KEY, LLAMA_MODEL_ALIAS, body)
    via = clients.node_stream(stack.gateway_url, GATEWAY_KEY, MODEL, body)
    ledger.record(MODEL, True, via.usage)
    check_same(via, direct, streamed=True)


def test_curl_raw_sse_decodes_to_the_same_stream(stack: Stack, ledger: Ledger, tmp_path: Path) -> None:
    body = chat_request("Give me a short greeting.", stream=True)
    direct = clients.curl_stream(stack.llama_url, DIRECT_KEY, LLAMA_MODEL_ALIAS, body, tmp_path / "direct")
    via = clients.curl_stream(stack.gateway_url, GATEWAY_KEY, MODEL, body, tmp_path / "via")
    ledger.record(MODEL, True, via.answer.usage)
    assert via.status == 200
    assert via.headers["content-type"].startswith("text/event-stream")
    assert via.headers["x-gateway-deployment"] == f"llama/{LLAMA_MODEL_ALIAS}"
    assert via.events[-1] == b"[DONE]" and via.events.count(b"[DONE]") == 1
    check_same(via.answer, direct.answer, streamed=True)
