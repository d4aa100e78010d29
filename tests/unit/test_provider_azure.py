"""Azure OpenAI translator: deployment URLs, api-version, api-key, content-filter chunks
(gateway.providers.chat_azure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config.types import ProviderConfig
from gateway.core.events import DeltaKind, Finish, OutputDelta, Usage
from gateway.core.sse import SSEEvent
from gateway.providers.base import ChatChunk
from gateway.providers.chat_azure import AzureChat, AzureStreamParser

BASE = "https://example.openai.azure.test"
FILTER = [{"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False, "severity": "safe"}}}]
PROMPT_FILTER = {"choices": [], "created": 0, "id": "", "model": "", "object": "", "prompt_filter_results": FILTER}


def azure(version: str = "2024-10-21", **kw: Any) -> AzureChat:
    return AzureChat(ProviderConfig(name="az", type="azure", base_url=BASE, api_key="azure-SECRET",
                                    api_version=version, **kw))


def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "content_filter_results": {}}
    if delta is not None:
        choice["delta"] = delta
    return {"id": "chatcmpl-az", "object": "chat.completion.chunk", "created": 17, "model": "gpt-4o-2024-08-06",
            "choices": [choice], **extra}


def test_chat_url_headers_and_body() -> None:
    req = azure().request({"model": "client-name", "messages": [], "stream": True, "x_extra": 1},
                               "gpt4o eu/1", stream=True, send_stream_options=True, client_headers={})
    assert req.url == f"{BASE}/openai/deployments/gpt4o%20eu%2F1/chat/completions?api-version=2024-10-21"
    assert req.headers["api-key"] == "azure-SECRET"
    assert "authorization" not in {k.lower() for k in req.headers}
    sent = orjson.loads(req.body)
    assert "model" not in sent and sent["x_extra"] == 1 and sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_old_api_versions_get_no_stream_options_and_learned_fallback_drops_them() -> None:
    old = azure("2024-06-01").request({"messages": [], "stream_options": {"include_usage": True}}, "d",
                                           stream=True, send_stream_options=True, client_headers={})
    assert "stream_options" not in orjson.loads(old.body)
    learned = azure().request({"messages": []}, "d", stream=True, send_stream_options=False, client_headers={})
    assert "stream_options" not in orjson.loads(learned.body)
    plain = azure().request({"messages": [], "stream": True, "stream_options": {}}, "d", stream=False,
                                 send_stream_options=False, client_headers={})
    assert set(orjson.loads(plain.body)) == {"messages"}


def test_embeddings_url() -> None:
    req = azure("2024-02-01").embeddings_request({"model": "x", "input": "hi"}, "emb-3")
    assert req.url == f"{BASE}/openai/deployments/emb-3/embeddings?api-version=2024-02-01"
    assert orjson.loads(req.body) == {"input": "hi"} and req.headers["api-key"] == "azure-SECRET"


def parse(parser: AzureStreamParser, obj: dict[str, Any]) -> list[ChatChunk]:
    return parser.parse(SSEEvent(orjson.dumps(obj)))


def test_prompt_filter_chunk_rides_on_the_first_chunk_with_choices() -> None:
    p = AzureStreamParser()
    assert parse(p, PROMPT_FILTER) == []
    role = parse(p, chunk({"role": "assistant", "content": ""}))
    assert len(role) == 1 and role[0].raw is None
    assert role[0].obj is not None and role[0].obj["prompt_filter_results"] == FILTER
    assert role[0].obj["id"] == "chatcmpl-az"
    text = parse(p, chunk({"content": "Hi"}))
    assert text[0].raw is not None, "an unchanged chunk is forwarded as Azure's own bytes"
    assert text[0].events == [OutputDelta(0, DeltaKind.CONTENT, "Hi")]


def test_async_filter_chunk_without_delta_is_made_safe() -> None:
    p = AzureStreamParser()
    parse(p, chunk({"role": "assistant", "content": ""}))
    late = {"id": "", "object": "", "created": 0, "model": "", "choices": [{
        "index": 0, "finish_reason": None, "content_filter_results": {"violence": {"filtered": False}},
        "content_filter_offsets": {"check_offset": 0, "start_offset": 0, "end_offset": 9}}]}
    out = parse(p, late)
    assert out[0].obj is not None
    assert out[0].obj["choices"][0]["delta"] == {}
    assert (out[0].obj["id"], out[0].obj["object"], out[0].obj["model"]) == (
        "chatcmpl-az", "chat.completion.chunk", "gpt-4o-2024-08-06")
    assert out[0].events == []


def test_content_filter_finish_and_usage_pass_through() -> None:
    p = AzureStreamParser()
    fin = parse(p, chunk({}, "content_filter"))
    assert fin[0].events == [Finish(0, "content_filter")] and fin[0].raw is not None
    usage = {**chunk(None), "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}
    out = parse(p, usage)
    assert out[0].events == [Usage(input=9, output=3)]


@pytest.mark.parametrize("data", [b"[DONE]", b"not json"])
def test_done_and_garbage_are_the_openai_parser_s(data: bytes) -> None:
    out = AzureStreamParser().parse(SSEEvent(data))
    assert len(out) == 1 and out[0].obj is None
