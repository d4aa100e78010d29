"""Chat Completions on any Google generateContent endpoint: the Gemini API's cell (`chat_gemini`) and
Vertex AI's Gemini models (`chat_vertex`) share it. The request is `google_request`'s, the answer
`google_stream`'s, errors `google_errors`'."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from mypy_extensions import mypyc_attr

from gateway.core.events import Failure
from gateway.providers.base import SSE, ParsedBody, UpstreamRequest
from gateway.providers.convert.google_errors import classify_google_http_error
from gateway.providers.convert.google_request import google_body
from gateway.providers.convert.google_stream import GoogleStreamParser, parse_google_body

Clock = Callable[[], float]


def method_url(models_url: str, model: str, stream: bool) -> str:
    """`{models_url}/{model}:generateContent`, or the SSE stream's method."""
    model = model.removeprefix("models/")
    return f"{models_url}/{model}:streamGenerateContent?alt=sse" if stream else f"{models_url}/{model}:generateContent"


@mypyc_attr(allow_interpreted_subclasses=True)  # a provider's own translator extends it (docs/compiled.md)
class GoogleChat:
    """Chat Completions on a generateContent endpoint: `models_url` is the URL the model's name follows."""

    framing = SSE
    sends_stream_options = False  # every Google response carries usageMetadata: nothing to ask

    def __init__(self, models_url: str, headers: Mapping[str, str], clock: Clock = time.time) -> None:
        self.models_url = models_url
        self._headers = {"content-type": "application/json", **headers}
        self._clock = clock  # only for the `created` field OpenAI shapes carry

    def headers_for(self, stream: bool) -> dict[str, str]:
        return {**self._headers, "accept": "text/event-stream" if stream else "application/json"}

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        return UpstreamRequest("POST", method_url(self.models_url, model, stream), self.headers_for(stream),
                               orjson.dumps(google_body(body)), stream)

    def stream_parser(self) -> GoogleStreamParser:
        return GoogleStreamParser(int(self._clock()))

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_google_body(body, int(self._clock()))

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_google_http_error(status, headers, body)


GEMINI_API = "https://generativelanguage.googleapis.com"
