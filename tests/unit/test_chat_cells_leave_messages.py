"""No chat cell changes the Chat Completions body it is given, its messages least of all: the Responses
bridge hands every cell the messages a WebSocket conversation's earlier turns translated to, kept and
handed again on the next turn (`convert.responses_chat_request.InputMemo`). A cell that changed one in
place would change what every later turn sends."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.providers.base import breakpoints_for, with_breakpoints
from gateway.providers.registry import CELLS, PROVIDER_TYPES
from gateway.providers.settings import AwsSettings, ProviderConfig

CONFIGS = {
    "openai": ProviderConfig("o", "openai", "http://up/v1", "sk-o"),
    "azure": ProviderConfig("az", "azure", "http://up", "k", api_version="2024-10-21"),
    "anthropic": ProviderConfig("a", "anthropic", "http://up", "sk-a"),
    "gemini": ProviderConfig("g", "gemini", "http://up", "k"),
    "vertex": ProviderConfig("vx", "vertex", "http://up", project="p", location="global"),
    "bedrock": ProviderConfig("b", "bedrock", "http://up", aws=AwsSettings(region="us-east-1")),
    "mock": ProviderConfig("m", "mock"),
}

MARK = {"type": "ephemeral"}
BODY: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": [{"type": "text", "text": "cached", "cache_control": MARK}]},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}}]},
        {"role": "assistant", "content": "calling", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"d\": \"/\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a b", "cache_control": MARK},
        {"role": "tool", "tool_call_id": "c2", "content": "text"},
        {"role": "user", "content": "and?", "cache_control": MARK},
        {"role": "assistant", "content": [{"type": "text", "text": "so"}]},
    ],
    "tools": [{"type": "function", "function": {"name": "ls", "description": "list", "parameters": {
        "type": "object", "properties": {"d": {"type": "string"}}}}, "cache_control": MARK}],
    "max_tokens": 64, "temperature": 0.5, "reasoning_effort": "low", "user": "u",
}


@pytest.mark.parametrize("provider", sorted(t for t in PROVIDER_TYPES if ("chat", t) in CELLS))
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("scan", "auto"), [(True, False), (True, True), (False, True)])
def test_a_chat_cell_leaves_the_body_it_is_given_as_it_was(provider: str, stream: bool, scan: bool,
                                                           auto: bool) -> None:
    """Each cell, and an Anthropic-format cell's twins for each breakpoint setting (they edit markers)."""
    cell = with_breakpoints(CELLS[("chat", provider)](CONFIGS[provider]), breakpoints_for(scan, auto))
    body = copy.deepcopy(BODY)
    cell.request(body, "model-1", stream=stream, client_headers={}, send_stream_options=True)
    assert body == BODY
