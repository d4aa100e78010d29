"""The Responses API (`POST /v1/responses`) to OpenAI (`{base_url}/responses`) and Azure OpenAI
(`{base_url}/openai/responses?api-version=`).

Nothing is translated: the request passes through with `model` rewritten to the deployment's and
`stream` set as the pipeline needs; unknown fields pass untouched. Usage needs no asking: the
`response` object always carries it. Headers and HTTP error classification are the chat translator's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.events import Failure, FailureKind, InbandError
from gateway.core.responses.wire import ResponsesEvent, ResponsesParser, response_events
from gateway.core.sse import DONE, SSEEvent
from gateway.providers.base import ResponsesBody, UpstreamRequest
from gateway.providers.chat_openai import OpenAIChat


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


def parse_responses_body(body: bytes) -> ResponsesBody:
    try:
        obj = orjson.loads(body.strip() or b"null")
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or not (isinstance(obj.get("output"), list) or obj.get("status") == "failed"):
        bad = InbandError(Failure(FailureKind.MALFORMED, "upstream answered without a response object"))
        return ResponsesBody({}, [bad])
    return ResponsesBody(obj, response_events(obj, with_output=True))


class ResponsesRequests:
    """The Responses methods, on top of a chat translator's URL and headers (listed first in the bases)."""

    def _url(self, path: str, model: str) -> str:
        raise NotImplementedError

    def _headers_for(self, stream: bool) -> dict[str, str]:
        raise NotImplementedError

    def responses_request(self, body: Mapping[str, Any], model: str, *, stream: bool) -> UpstreamRequest:
        out = dict(body)
        out["model"] = model
        if stream:
            out["stream"] = True
        else:
            out.pop("stream", None)
            out.pop("stream_options", None)  # only allowed with `stream: true`
        return UpstreamRequest("POST", self._url("/responses", model), self._headers_for(stream),
                               orjson.dumps(out), stream)

    def responses_stream_parser(self) -> OpenAIResponsesStreamParser:
        return OpenAIResponsesStreamParser()

    def parse_responses_body(self, body: bytes) -> ResponsesBody:
        return parse_responses_body(body)


class OpenAIResponses(OpenAIChat, ResponsesRequests):
    """Provider type `openai`: the chat translator's headers and errors, `{base_url}/responses`."""
