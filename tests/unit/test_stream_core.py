"""The stream-core interface (`core.stream.StreamCore`): every API's core owns its end and its error bytes,
and they are what the official SDKs expect (issue #29).

- a cut stream ended with the core's `fail` is read by the SDK as an error, with the text before it:
  test_a_failed_stream_raises_in_the_sdk_after_the_text
- `fail` writes what the pipeline wrote before the cores owned it (`GatewayError`'s own renderings):
  test_fail_is_the_apis_error_event_of_the_gateway_error
- a refused or held stream releases nothing more before its error event:
  test_fail_after_a_refusal_or_while_held_releases_nothing
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.stream import StreamCore
from gateway.errors import GatewayError, RateLimited, UpstreamClientError, UpstreamFailed, UpstreamTimeout
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from gateway.providers.convert.responses_pass_through import OpenAIResponsesStreamParser
from tests import anthropic_scripts as a
from tests.unit import sdk_read
from tests.unit.model_safety import safety
from tests.unit.test_responses_stream import message_events

CHAT_HEAD = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
             b'"delta":{"role":"assistant","content":"partial "},"finish_reason":null}]}\n\n')


def _sse(objs: list[dict[str, Any]], named: bool) -> bytes:
    if named:
        return b"".join(b"event: " + o["type"].encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n" for o in objs)
    return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs)


def chat(factory: Any) -> tuple[StreamCore, bytes]:
    stream = ChatStream(OpenAIStreamParser(), "up/m")
    stream.feed(CHAT_HEAD)
    return stream, stream.commit(ChatOutputFilter(factory, False))


def responses(factory: Any) -> tuple[StreamCore, bytes]:
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "up/m")
    stream.feed(_sse(message_events(["partial ", "answer"])[:5], named=True))
    return stream, stream.commit(ResponsesOutputFilter(factory))


def messages(factory: Any) -> tuple[StreamCore, bytes]:
    stream = MessagesStream(AnthropicMessagesStreamParser(), "up/m")
    stream.feed(_sse([a.message_start(), *a.text_block(0, ["partial ", "answer"])[:2]], named=True))
    return stream, stream.commit(MessagesOutputFilter(factory))


CORES: dict[str, Callable[[Any], tuple[StreamCore, bytes]]] = {"chat": chat, "responses": responses,
                                                                "messages": messages}


@pytest.mark.parametrize("api", CORES)
@pytest.mark.parametrize("error", [UpstreamFailed("up/m: early eof after the first token"),
                                   UpstreamTimeout("up/m: idle timeout after the first token")],
                         ids=["failed", "timeout"])
def test_a_failed_stream_raises_in_the_sdk_after_the_text(api: str, error: GatewayError) -> None:
    run = safety(False).start()
    assert run is not None
    stream, head = CORES[api](run.factory)
    out = [head, stream.fail(error.client_error(), held=False, refused=False)]
    if api == "chat":
        with pytest.raises(openai.APIError) as info:
            sdk_read.openai_chat(out)
        assert error.message in str(info.value)
    elif api == "responses":
        with pytest.raises(openai.APIError) as info:
            sdk_read.openai_response(out)
        assert error.message in str(info.value)
    else:
        with pytest.raises(anthropic.APIStatusError) as ainfo:
            sdk_read.anthropic_message(out)
        assert ainfo.value.body["error"]["type"] == error.anthropic_type  # type: ignore[index]
    assert b"partial " in b"".join(out), "the text sent before the failure stands"


@pytest.mark.parametrize("error", [UpstreamFailed("boom"), RateLimited("slow down"),
                                   UpstreamClientError("bad", status=400, type="invalid_request_error")],
                         ids=["ours", "rate-limited", "upstream-4xx"])
def test_fail_is_the_apis_error_event_of_the_gateway_error(error: GatewayError) -> None:
    for api, expected in (("chat", error.sse_bytes()), ("messages", error.anthropic_sse_bytes())):
        stream, _ = CORES[api](None)
        assert stream.fail(error.client_error(), held=False, refused=False) == expected, api
    stream, _ = CORES["responses"](None)
    got = orjson.loads(stream.fail(error.client_error(), held=True, refused=False).split(b"data: ", 1)[1])
    body = error.body()["error"]
    assert got == {"type": "error", "sequence_number": 0, "code": body["code"], "message": body["message"],
                   "param": body["param"], "error": body}


@pytest.mark.parametrize("api", CORES)
def test_fail_after_a_refusal_or_while_held_releases_nothing(api: str) -> None:
    run = safety(False).start()
    assert run is not None
    err = UpstreamFailed("x").client_error()
    for held, refused in ((True, False), (False, True)):
        stream, _ = CORES[api](run.factory)
        out = stream.fail(err, held=held, refused=refused)
        assert b"partial" not in out and b"answer" not in out
        assert out.count(b"\n\n") == 1, "one error event and nothing else"
    stream, _ = CORES[api](run.factory)
    released = stream.fail(err, held=False, refused=False)
    assert released.count(b"\n\n") >= 1
