"""The Responses API on top of any chat cell (the Responses bridge, docs/responses-bridge.md): the request translated
to Chat Completions by `responses_chat_request`, the chat stream read by the chat cell's own parser and
turned into Responses events by `responses_chat_stream`, a chat body into the `response` object.
URL, headers, framing, `stream_options` and HTTP error classification are the chat cell's.

A bridged deployment keeps no responses: a request that names `previous_response_id` cannot be served
by it (the pipeline answers 400 when no deployment of the model can, `pipeline.request.keep_serving`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.events import InbandError, last_usage
from gateway.core.responses.wire import response_events
from gateway.providers.base import (
    AddsBreakpoints,
    Breakpoints,
    ParsedBody,
    Translator,
    Unserved,
    UpstreamRequest,
    with_breakpoints,
)
from gateway.providers.convert.responses_chat_request import Echo, chat_body, echo_of
from gateway.providers.convert.responses_chat_stream import ResponsesFromChat, counted, response_from_completion
from gateway.providers.convert.via_chat import ViaChat

NO_STATE = Unserved("previous_response_id is not supported by this model's deployments: only OpenAI Responses "
                    "upstreams keep earlier responses; send the conversation in `input` instead",
                    "previous_response_id")


class ResponsesViaChat(ViaChat, AddsBreakpoints):
    """The Responses API on a provider's chat cell. Built once per config; `bind` gives the per-request
    translator whose parsers know the request (`Echo`)."""

    per_request = True  # `providers.base.PerRequest`

    def __init__(self, chat: Translator, echo: Echo | None = None) -> None:
        super().__init__(chat)
        self.echo = echo or Echo()

    def unserved(self, body: Mapping[str, Any]) -> Unserved | None:
        return NO_STATE if body.get("previous_response_id") is not None else None

    def with_breakpoints(self, breakpoints: Breakpoints) -> ResponsesViaChat:
        """The bridge over its chat cell's twin (an Anthropic-format cell's: breakpoints through the
        bridge too); itself when the chat cell takes no markers."""
        chat = with_breakpoints(self.chat, breakpoints)
        return self if chat is self.chat else ResponsesViaChat(chat, self.echo)

    def bind(self, body: Mapping[str, Any]) -> ResponsesViaChat:
        return ResponsesViaChat(self.chat, echo_of(body))

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        return self.chat.request(chat_body(body), model, stream=stream, client_headers=client_headers,
                                 send_stream_options=send_stream_options)

    def stream_parser(self) -> ResponsesFromChat:
        return ResponsesFromChat(self.chat.stream_parser(), self.echo)

    def parse_body(self, body: bytes) -> ParsedBody:
        parsed = self.chat.parse_body(body)
        errors = [e for e in parsed.events if type(e) is InbandError]
        if errors or not parsed.obj:
            return ParsedBody({}, list(errors) or parsed.events)
        resp = response_from_completion(parsed.obj, parsed.events, self.echo)
        return ParsedBody(resp, counted(response_events(resp, with_output=True), last_usage(parsed.events)))
