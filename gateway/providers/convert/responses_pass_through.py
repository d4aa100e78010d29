"""The Responses API passed through to a server that serves it (OpenAI's `{base_url}/responses`, Azure's
`/openai/responses?api-version=`, the built-in mock): nothing is translated; the request passes with
`model` rewritten to the deployment's and `stream` set as the pipeline needs, unknown fields untouched.
Usage needs no asking: the `response` object always carries it. URL, headers and HTTP error
classification are the provider's chat cell's (`Endpoint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from mypy_extensions import mypyc_attr

from gateway.core.events import Failure, FailureKind, InbandError
from gateway.core.json_body import encode
from gateway.core.responses.wire import ResponsesEvent, ResponsesParser, response_events
from gateway.core.sse import DONE, SSEEvent
from gateway.providers.base import SSE, ParsedBody, UpstreamRequest
from gateway.providers.convert.pass_through import passed_through


class OpenAIResponsesStreamParser:
    __slots__ = ("_core",)

    def __init__(self) -> None:
        self._core = ResponsesParser()

    def parse(self, event: SSEEvent) -> list[ResponsesEvent]:
        data = event.data
        if data[:6] == DONE:  # OpenAI sends none; some compatible servers do
            return [ResponsesEvent("[DONE]", None, None, done=True)]
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return [self._core.parse(None, None, event.event)]
        return [self._core.parse(obj, data, event.event)]

    def finish(self) -> list[ResponsesEvent]:
        return []  # a Responses upstream owes nothing at the end of its bytes


def parse_responses_body(body: bytes) -> ParsedBody:
    try:
        obj = orjson.loads(body.strip() or b"null")
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or not (isinstance(obj.get("output"), list) or obj.get("status") == "failed"):
        bad = InbandError(Failure(FailureKind.MALFORMED, "upstream answered without a response object"))
        return ParsedBody({}, [bad])
    return ParsedBody(obj, response_events(obj, with_output=True))


class Endpoint(Protocol):
    """Where a provider's OpenAI-style endpoints are and how they are called: its chat cell's."""

    def url(self, path: str, model: str) -> str: ...

    def headers_for(self, stream: bool) -> dict[str, str]: ...

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure: ...


@mypyc_attr(allow_interpreted_subclasses=True)  # a provider's own translator extends it (docs/compiled.md)
class ResponsesPassThrough:
    """The Responses API passed through to a provider that serves it, at `endpoint.url("/responses")`."""

    framing = SSE
    sends_stream_options = False  # the `response` object always carries its usage
    keeps_answers = True  # the upstream stores its responses: `providers.base.keeps_answers`

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = passed_through(body, model, stream=stream)  # `stream_options` only with `stream: true`
        return UpstreamRequest("POST", self.endpoint.url("/responses", model), self.endpoint.headers_for(stream),
                               encode(out), stream)

    def stream_parser(self) -> OpenAIResponsesStreamParser:
        return OpenAIResponsesStreamParser()

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_responses_body(body)

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return self.endpoint.classify_http_error(status, headers, body)
