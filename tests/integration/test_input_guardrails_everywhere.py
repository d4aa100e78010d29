"""Input guardrails on the routes that send a prompt upstream without asking for an answer (CONTRACT
§5.2: input guardrails run before any upstream call): Anthropic token counting and embeddings. A refused
prompt gets the API's own 400 and the upstream is sent nothing; an allowed one passes. A counted prompt
is masked as the Messages request it counts is (`redaction.inputs`, §5.1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream, json_script
from tests.harness import GatewayServer

TERM = {"name": "nightingale", "type": "terms", "terms": ["project nightingale"], "stage": "input"}
COUNT_PATH = "/a/v1/messages/count_tokens"
EMBED_PATH = "/v1/embeddings"


def config(url: str, redaction: str = "off") -> Any:
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"},
                      "a": {"type": "anthropic", "base_url": f"{url}/a", "api_key": "ka"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}], "guardrails": ["nightingale"]},
                   {"name": "claude", "deployments": [{"provider": "a", "model": "c"}],
                    "guardrails": ["nightingale"], "redaction": redaction}],
        "guardrails": [TERM],
        "redaction": {"profiles": {"in": {"rules": ["secrets"], "inputs": True}}},
    }, env={})


BLOCKED_COUNTS: dict[str, dict[str, Any]] = {
    "message": {"messages": [{"role": "user", "content": "what is Project Nightingale?"}]},
    "system": {"system": [{"type": "text", "text": "you run project\nnightingale"}],
               "messages": [{"role": "user", "content": "hi"}]},
    "tool_result": {"messages": [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "find", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "project nightingale: launch"}]}]}]},
    # what the model reads in documents and search results (before, never judged)
    "document_text": {"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "project nightingale"}},
        {"type": "text", "text": "summarise it"}]}]},
    "document_content": {"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "content", "content": [
            {"type": "text", "text": "chapter one"}, {"type": "text", "text": "Project Nightingale"}]}}]}]},
    "document_context": {"messages": [{"role": "user", "content": [
        {"type": "document", "context": "about project nightingale",
         "source": {"type": "url", "url": "https://docs.example/a.pdf"}}]}]},
    "search_result": {"messages": [{"role": "user", "content": [
        {"type": "search_result", "source": "https://kb.example/1", "title": "KB",
         "content": [{"type": "text", "text": "project nightingale is on"}]}]}]},
    "search_result_in_tool_result": {"messages": [
        {"role": "user", "content": "search"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "kb", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "search_result", "source": "https://kb.example/2", "title": "Project Nightingale",
             "content": [{"type": "text", "text": "launch plan"}]}]}]}]},
}


@pytest.mark.parametrize("where", list(BLOCKED_COUNTS))
def test_token_counting_passes_on_no_prompt_an_input_guardrail_refuses(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], where: str) -> None:
    """Claude Code counts the conversation it is about to send: before, the count sent the refused
    prompt to the provider (only `/v1/messages` was judged)."""
    gw = make_gateway(config(upstream.base_url))
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="k", max_retries=0, timeout=20)
    upstream.enqueue(COUNT_PATH, json_script({"input_tokens": 12}))
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.count_tokens(model="claude", **BLOCKED_COUNTS[where])
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "nightingale" in info.value.message
    assert upstream.bodies(COUNT_PATH) == [], "the refused prompt never left"
    assert client.messages.count_tokens(model="claude", messages=[{"role": "user", "content": "hi"}]).input_tokens == 12
    assert len(upstream.bodies(COUNT_PATH)) == 1
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail="nightingale", stage="input",
                     verdict="block") == 1


@pytest.mark.parametrize("blocked", ["Project Nightingale rocks", ["fine", "project nightingale"]])
def test_embeddings_embed_no_input_an_input_guardrail_refuses(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], blocked: str | list[str]) -> None:
    gw = make_gateway(config(upstream.base_url))
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
    upstream.enqueue(EMBED_PATH, json_script({"object": "list", "model": "x", "usage": {"prompt_tokens": 2,
                                                                                       "total_tokens": 2},
                                              "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}]}))
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="m", input=blocked, encoding_format="float")
    assert info.value.code == "guardrail_blocked" and info.value.param == "nightingale"
    assert upstream.bodies(EMBED_PATH) == [], "the refused input never left"
    got = client.embeddings.create(model="m", input=["fine", "also fine"], encoding_format="float")
    assert got.data[0].embedding == [0.5] and len(upstream.bodies(EMBED_PATH)) == 1


def test_token_counting_masks_the_prompt_as_the_messages_request_it_counts(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """`redaction.inputs: true` masks the prompt before it leaves: before, the count sent it in clear."""
    key = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
    gw = make_gateway(config(upstream.base_url, redaction="in"))
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="k", max_retries=0, timeout=20)
    upstream.enqueue(COUNT_PATH, json_script({"input_tokens": 12}))
    assert client.messages.count_tokens(model="claude", system=f"deploy with {key}", messages=[
        {"role": "user", "content": [{"type": "text", "text": f"my key is {key}"}]}]).input_tokens == 12
    [sent] = upstream.bodies(COUNT_PATH)
    assert key[:12] not in str(sent)
    assert sent["system"] == "deploy with [REDACTED:openai_key]"
    assert sent["messages"][0]["content"][0]["text"] == "my key is [REDACTED:openai_key]"


def test_documents_and_search_results_are_masked_before_they_leave(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """`redaction.inputs: true` masks the texts the input guardrails judge: a document's text source, its
    content blocks, title and context, and a search result's texts (a message's own, or a tool result's)."""
    key = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
    gw = make_gateway(config(upstream.base_url, redaction="in"))
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="k", max_retries=0, timeout=20)
    upstream.enqueue("/a/v1/messages", a.message_body([{"type": "text", "text": "ok"}]))
    result = {"type": "search_result", "source": "https://kb.example/1", "title": f"T {key}",
              "content": [{"type": "text", "text": f"k={key}"}]}
    client.messages.create(model="claude", max_tokens=8, messages=[  # type: ignore[misc]
        {"role": "user", "content": [
            {"type": "document", "title": f"T {key}", "context": f"c {key}",
             "source": {"type": "text", "media_type": "text/plain", "data": f"d {key}"}},
            {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": f"b {key}"}]}},
            {"type": "document", "source": {"type": "content", "content": f"s {key}"}},
            result, {"type": "tool_result", "tool_use_id": "t0", "content": [result]}]}])
    [sent] = upstream.bodies("/a/v1/messages")
    assert key[:12] not in str(sent)
    doc, blocks, plain, found, tool = sent["messages"][0]["content"]
    masked = "[REDACTED:openai_key]"
    assert (doc["title"], doc["context"], doc["source"]["data"]) == (f"T {masked}", f"c {masked}", f"d {masked}")
    assert blocks["source"]["content"][0]["text"] == f"b {masked}" and plain["source"]["content"] == f"s {masked}"
    for r in (found, tool["content"][0]):
        assert (r["title"], r["content"][0]["text"], r["source"]) == (f"T {masked}", f"k={masked}", result["source"])
