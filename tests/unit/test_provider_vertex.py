"""The `vertex` and `gemini` cells' URLs, bodies and dispatch (gateway.providers.chat_vertex,
messages_vertex, chat_gemini): Claude by rawPredict with Anthropic's body, Gemini by generateContent; the
stream parser that becomes Anthropic's or Google's at the first event; errors in either shape."""

from __future__ import annotations

import orjson
import pytest

from gateway.config import parse_config
from gateway.core.events import FailureKind, InbandError
from gateway.core.sse import SSEDecoder
from gateway.providers.chat_gemini import GeminiChat
from gateway.providers.chat_vertex import VertexChat
from gateway.providers.messages_vertex import VertexMessages
from gateway.providers.settings import ProviderConfig
from tests import anthropic_scripts as a
from tests import google_scripts as g

USER = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}


def provider(ptype: str, **raw: str) -> ProviderConfig:
    cfg = parse_config({"auth": {"allow_unauthenticated": True}, "providers": {"p": {"type": ptype, **raw}},
                        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}]}]}, env={})
    return cfg.providers["p"]


@pytest.mark.parametrize(("location", "host"), [("europe-west4", "https://europe-west4-aiplatform.googleapis.com"),
                                                ("global", "https://aiplatform.googleapis.com")])
def test_vertex_urls_by_location_and_family(location: str, host: str) -> None:
    chat = VertexChat(provider("vertex", project="proj", location=location))
    root = f"{host}/v1/projects/proj/locations/{location}/publishers"
    claude = chat.request(USER, "claude-sonnet-4-5@20250929", stream=True, client_headers={},
                          send_stream_options=True)
    assert claude.url == f"{root}/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    body = orjson.loads(claude.body)
    assert "model" not in body and body["anthropic_version"] == "vertex-2023-10-16" and body["stream"] is True
    gemini = chat.request(USER, "gemini-2.5-pro", stream=False, client_headers={}, send_stream_options=True)
    assert gemini.url == f"{root}/google/models/gemini-2.5-pro:generateContent"
    assert "contents" in orjson.loads(gemini.body) and "authorization" not in gemini.headers  # the signer's


def test_vertex_config_requires_project_and_location() -> None:
    with pytest.raises(Exception, match="project: required for type vertex"):
        provider("vertex", location="global")


@pytest.mark.parametrize(("base", "url"), [
    ("", "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
    ("http://127.0.0.1:9/v1beta", "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
    ("http://127.0.0.1:9", "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")])
def test_gemini_url_and_key(base: str, url: str) -> None:
    raw = {"api_key": "AIza-k", **({"base_url": base} if base else {})}
    req = GeminiChat(provider("gemini", **raw)).request(USER, "models/gemini-2.5-flash", stream=True,
                                                       client_headers={}, send_stream_options=True)
    assert req.url == url and req.headers["x-goog-api-key"] == "AIza-k"


def test_messages_to_claude_on_vertex_keeps_the_body_and_the_beta() -> None:
    body = {**USER, "thinking": {"type": "enabled", "budget_tokens": 1024}, "model": "client-name", "new": 1}
    req = VertexMessages(provider("vertex", project="p", location="us-east5")).request(
        body, "claude-opus-4-1@20250805", stream=False, client_headers={"anthropic-beta": "b1"},
        send_stream_options=False)
    sent = orjson.loads(req.body)
    assert sent == {"messages": USER["messages"], "max_tokens": 10, "thinking": body["thinking"], "new": 1,
                    "anthropic_version": "vertex-2023-10-16"}
    assert req.headers["anthropic-beta"] == "b1" and req.url.endswith(":rawPredict")


def _parse(parser: object, raw: bytes) -> list[object]:
    out: list[object] = []
    for ev in SSEDecoder().feed(raw):
        out += parser.parse(ev)  # type: ignore[attr-defined]
    return out


def test_the_stream_parser_follows_the_first_event() -> None:
    msgs = VertexMessages(provider("vertex", project="p", location="global"))
    claude = msgs.stream_parser()
    _parse(claude, b"".join(a.event(e) for e in [a.message_start(), *a.text_block(0, ["hi"])]))
    assert claude.native is True  # Anthropic's own events: the fast path may read their bytes
    gemini = msgs.stream_parser()
    events = _parse(gemini, g.sse(g.text_stream(["hi"])))
    assert gemini.native is False and [e.type for e in events][:1] == ["message_start"]  # type: ignore[attr-defined]
    chat = VertexChat(provider("vertex", project="p", location="global")).stream_parser()
    err = [e for ch in _parse(chat, g.sse([g.error("UNAVAILABLE", 503)])) for e in ch.events]  # type: ignore[attr-defined]
    assert isinstance(err[0], InbandError) and err[0].failure.kind is FailureKind.INBAND


def test_errors_in_either_shape() -> None:
    chat = VertexChat(provider("vertex", project="p", location="global"))
    overloaded = orjson.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "o"}})
    assert chat.classify_http_error(529, {}, overloaded).code == "overloaded_error"
    denied = orjson.dumps(g.error("PERMISSION_DENIED", 403))
    assert chat.classify_http_error(403, {}, denied).kind is FailureKind.UPSTREAM_AUTH
