"""What every Vertex AI cell shares, sans I/O: the endpoint (URLs of Claude's and Google's publishers, the
headers; the bearer token is the signer's), Claude's body as Vertex takes it, a stream parser that
becomes Anthropic's or Google's at the first event (Anthropic's events carry a `type`, Google's
responses never do), and the HTTP error classification of either family."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.core.events import Failure
from gateway.core.sse import SSEEvent
from gateway.providers.convert.anthropic_errors import classify_anthropic_http_error
from gateway.providers.convert.google_errors import classify_google_http_error
from gateway.providers.settings import ProviderConfig

VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"


def vertex_base_url(provider: ProviderConfig) -> str:
    """`https://{location}-aiplatform.googleapis.com`; the `global` location has no regional host."""
    location = provider.location or "global"
    return "https://aiplatform.googleapis.com" if location == "global" else f"https://{location}-aiplatform.googleapis.com"


def is_claude(model: str) -> bool:
    return model.startswith("claude-")


class VertexEndpoint:
    """A Vertex provider's URLs and headers (the bearer token is the signer's)."""

    def __init__(self, provider: ProviderConfig) -> None:
        base = (provider.base_url or vertex_base_url(provider)).rstrip("/")
        base = base.removesuffix("/v1")
        self.publishers = (f"{base}/v1/projects/{provider.project}/locations/{provider.location or 'global'}"
                           "/publishers")
        self.headers = {"content-type": "application/json", **provider.headers}

    def claude_url(self, model: str, stream: bool) -> str:
        return f"{self.publishers}/anthropic/models/{model}:{'streamRawPredict' if stream else 'rawPredict'}"

    def claude_headers(self, stream: bool) -> dict[str, str]:
        return {**self.headers, "accept": "text/event-stream" if stream else "application/json"}


def claude_body(out: dict[str, Any], stream: bool) -> bytes:
    """Anthropic's Messages body as Vertex takes it: the version in the body, the model in the URL."""
    out.pop("model", None)
    out["anthropic_version"] = VERTEX_ANTHROPIC_VERSION
    if stream:
        out["stream"] = True
    else:
        out.pop("stream", None)
    return orjson.dumps(out)


class ByFirstEvent:
    """A stream parser that becomes Anthropic's or Google's at the first event (see the module doc)."""

    __slots__ = ("_anthropic", "_google", "_parser", "native")
    shape = None  # every event is parsed whole

    def __init__(self, anthropic: Callable[[], Any], google: Callable[[], Any]) -> None:
        self._anthropic, self._google = anthropic, google
        self._parser: Any = None
        self.native = False  # a Messages stream core may read the events by their bytes: Anthropic's own

    def parse(self, event: SSEEvent) -> list[Any]:
        if self._parser is None:
            self._parser = self._anthropic() if is_anthropic_event(event) else self._google()
            self.native = bool(getattr(self._parser, "native", False))
        result: list[Any] = self._parser.parse(event)
        return result

    def finish(self) -> list[Any]:
        return list(self._parser.finish()) if self._parser is not None and hasattr(self._parser, "finish") else []


def is_anthropic_event(event: SSEEvent) -> bool:
    if event.event:
        return True  # Anthropic names its events; Google's stream has data lines only
    try:
        obj = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("type"), str)


def is_anthropic_body(body: bytes, also_completion: bool = False) -> bool:
    """Anthropic's bodies (a Message, an error) carry a top-level `type`; Google's never do."""
    try:
        obj = orjson.loads(body.strip() or b"null")
    except orjson.JSONDecodeError:
        return False
    if not isinstance(obj, dict):
        return False
    return isinstance(obj.get("type"), str) or (also_completion and obj.get("object") == "chat.completion")


def classify_vertex_http_error(status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    """Claude's errors are Anthropic's (`{"type":"error","error":{"type":...}}`); Vertex's own Google's."""
    if is_anthropic_body(body):
        return classify_anthropic_http_error(status, headers, body)
    return classify_google_http_error(status, headers, body)
