"""Chat Completions to Azure OpenAI: deployment paths, `api-version`, the `api-key` header.

`{base_url}/openai/deployments/{model}/chat/completions?api-version={api_version}` (and `/embeddings`);
the deployment is in the path, so the body carries no `model`. The wire format is OpenAI's, with
Azure's content-filter additions normalised so an OpenAI client never trips on them:

- the prompt-filter chunk (`choices: []`, `prompt_filter_results`, empty id/model/object, created 0)
  is not sent on its own: its `prompt_filter_results` ride on the next chunk that has choices, which
  carries a real id and model (so the SDK's `.stream()` helper does not take "" for the id);
- asynchronous-filter chunks whose choices have no `delta` get `delta: {}`, and their empty
  id/object/model/created are filled from the stream's own;
- `finish_reason: "content_filter"` passes through as is.
Unchanged chunks are still forwarded as Azure's own bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from gateway.core.json_body import encode
from gateway.core.sse import SSEEvent
from gateway.providers.base import ChatChunk, UpstreamRequest
from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from gateway.providers.settings import ProviderConfig

# Azure accepts `stream_options` from this api-version on (2024-09-01-preview; GA 2024-10-21); older
# ones reject it with a 400 that names no param, so it is not sent to them (usage is then unknown).
STREAM_OPTIONS_SINCE = "2024-09-01"
_META = ("id", "object", "created", "model")


class AzureStreamParser(OpenAIStreamParser):
    __slots__ = ("_base", "_prompt_filter")

    def __init__(self) -> None:
        # Azure's chunks carry per-chunk content_filter_results and may lack metadata that `_normalise`
        # fills in: every chunk is parsed whole
        super().__init__(read_by_shape=False)
        self._prompt_filter: Any = None
        self._base: dict[str, Any] | None = None

    def parse(self, event: SSEEvent) -> list[ChatChunk]:
        out: list[ChatChunk] = []
        for ch in super().parse(event):
            obj = ch.obj
            if obj is None:
                out.append(ch)
            elif not obj.get("choices") and obj.get("usage") is None and "prompt_filter_results" in obj:
                self._prompt_filter = obj["prompt_filter_results"]  # held for the next chunk with choices
            else:
                out.append(self._normalise(ch, obj))
        return out

    def _normalise(self, ch: ChatChunk, obj: dict[str, Any]) -> ChatChunk:
        changed = False
        if self._base is None and obj.get("id"):
            self._base = {"id": obj["id"], "object": "chat.completion.chunk", "created": obj.get("created", 0),
                          "model": obj.get("model", "")}
        if self._base is not None and not all(obj.get(k) for k in _META):
            for k in _META:
                if not obj.get(k):
                    obj[k] = self._base[k]
            changed = True
        choices = obj.get("choices")
        if isinstance(choices, list) and choices:
            for choice in choices:
                if isinstance(choice, dict) and not isinstance(choice.get("delta"), dict):
                    choice["delta"] = {}
                    changed = True
            if self._prompt_filter is not None:
                obj["prompt_filter_results"] = self._prompt_filter
                self._prompt_filter = None
                changed = True
        return ChatChunk(ch.events, obj, None, ch.done) if changed else ch


class AzureChat(OpenAIChat):
    """Translator for provider type `azure`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(provider)
        self._version = provider.api_version or ""
        self._stream_options_ok = self._version >= STREAM_OPTIONS_SINCE  # ISO dates compare as strings

    def _base_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.provider.api_key:
            headers["api-key"] = self.provider.api_key  # Azure's key header; no Authorization
        headers.update(self.provider.headers)
        return headers

    def url(self, path: str, model: str) -> str:
        return (f"{self.provider.base_url}/openai/deployments/{quote(model, safe='')}{path}"
                f"?api-version={quote(self._version, safe='')}")

    @property
    def sends_stream_options(self) -> bool:
        return self._stream_options_ok

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = {k: v for k, v in body.items() if k != "model"}
        out.pop("stream_options", None)
        if stream:
            out["stream"] = True
            opts = body.get("stream_options")
            if send_stream_options and self._stream_options_ok:
                out["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
        else:
            out.pop("stream", None)
        return UpstreamRequest("POST", self.url("/chat/completions", model), self.headers_for(stream),
                               encode(out), stream)

    def embeddings_request(self, body: Mapping[str, Any], model: str) -> UpstreamRequest:
        out = {k: v for k, v in body.items() if k != "model"}
        return UpstreamRequest("POST", self.url("/embeddings", model), self.headers_for(False),
                               encode(out), False)

    def stream_parser(self) -> AzureStreamParser:
        return AzureStreamParser()
