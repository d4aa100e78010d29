"""An upstream error that quotes a text, for each client API and each path an upstream text can take to a
client (an error status on a stream and on a body, an error inside a 200 body, an in-band error before and
after the first token): the scripts a fake upstream answers, and every byte a client reads of the gateway's
answer through the official SDKs. The scrubbing tests (`test_scrub_everywhere`: our secrets;
`test_scrub_profile`: what a model's redaction profile masks) share them, each with its own quote."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

from tests import anthropic_scripts as an
from tests.chat_scripts import chunk, error_script
from tests.fake_upstream import Script, json_script, sse
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, number, stream_script

PATHS = ["status_stream", "status_body", "inband_body", "inband_before", "after"]
ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
USER = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Quoting:
    """An upstream error whose fields quote: `message` everywhere, `code` and `param` in OpenAI's errors,
    `event_type` as an Anthropic error event's type; `instructions`: a failed Responses body echoes the
    message as its `instructions` too."""

    message: str
    code: str
    param: str
    kind: str = "invalid_request_error"
    event_type: str = "invalid_request_error"
    instructions: bool = False

    def script(self, api: str, path: str) -> Script:
        """What the upstream of `api` answers on `path` (any other path: an error after the first token)."""
        return {"chat": self._chat, "responses": self._responses, "messages": self._messages}[api](path)

    def _openai_error(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}

    def _chat(self, path: str) -> Script:
        if path in ("status_stream", "status_body"):
            return error_script(400, self.code, self.message, param=self.param)
        if path == "inband_body":
            return json_script({"error": self._openai_error()})
        if path == "inband_before":
            return Script([sse(chunk({"role": "assistant", "content": ""})), sse({"error": self._openai_error()})])
        return Script([sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "Partial "})),
                       sse(chunk({"content": "text"})), sse({"error": self._openai_error()}), b"data: [DONE]\n\n"])

    def _responses(self, path: str) -> Script:
        if path in ("status_stream", "status_body"):
            return error_script(400, self.code, self.message, param=self.param)
        if path == "inband_body":
            body = {"id": "resp_up", "object": "response", "status": "failed", "output": [],
                    "error": {"code": self.code, "message": self.message}}
            return json_script({**body, "instructions": self.message} if self.instructions else body)
        events = Answer(rid="resp_up").message(["Partial ", "text", " never"]).stream_events()
        failure = {"type": "error", "error": self._openai_error()}
        cut = 2 if path == "inband_before" else 6  # after response.in_progress, or after two text deltas
        return stream_script(number([*events[:cut], failure]))

    def _messages(self, path: str) -> Script:
        if path in ("status_stream", "status_body"):
            return an.error_body(400, "invalid_request_error", self.message)
        failure = {"type": "error", "error": {"type": self.event_type, "message": self.message}}
        if path == "inband_body":
            return json_script(failure)
        start = [an.message_start(), an.ping()]
        if path == "inband_before":
            return an.stream([*start, failure])
        return an.stream([*start, *an.text_block(0, ["Partial ", "text"])[:3], failure])


def read(call: Callable[[], Any]) -> str:
    """Every byte of an answer (status, headers, body), through the SDKs' raw access."""
    try:
        with call() as raw:
            return f"{raw.status_code} {raw.headers} " + b"".join(raw.iter_bytes()).decode()
    except (openai.APIStatusError, anthropic.APIStatusError) as err:
        return f"{err.status_code} {err.response.headers} {err.response.text} {err}"


def ask(gw: GatewayServer, api: str, path: str, model: str, api_key: str) -> str:
    """One request of `api` to `model` (streamed but on the body paths), read whole by `read`."""
    stream = path not in ("status_body", "inband_body")
    if api == "messages":
        a = anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key=api_key, max_retries=0, timeout=20)
        return read(lambda: a.messages.with_streaming_response.create(
            model=model, max_tokens=64, messages=USER, stream=stream))  # type: ignore[arg-type]
    o = openai.OpenAI(base_url=gw.base_url, api_key=api_key, max_retries=0, timeout=20)
    if api == "chat":
        return read(lambda: o.chat.completions.with_streaming_response.create(
            model=model, messages=USER, stream=stream))  # type: ignore[arg-type]
    return read(lambda: o.responses.with_streaming_response.create(model=model, input="hi", stream=stream))
