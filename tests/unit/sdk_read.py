"""What the official SDKs make of a stream's bytes, with their own parsers and accumulators and no socket:
the bytes become an httpx response's body, read by the SDK's `Stream` exactly as from the network."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2 as httpx
import openai
from anthropic.lib.streaming import MessageStream
from anthropic.types import Message, RawMessageStreamEvent
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.chat._types import ParsedChatCompletionSnapshot
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

_OPENAI = openai.OpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
_ANTHROPIC = anthropic.Anthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9")


def _response(pieces: list[bytes], url: str) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(pieces),
                          request=httpx.Request("POST", url))


def openai_chat(pieces: list[bytes]) -> tuple[ParsedChatCompletionSnapshot, list[ChatCompletionChunk]]:
    """openai-python's `Stream` over the bytes, accumulated by `ChatCompletionStreamState` (what
    `client.chat.completions.stream(...)` does): its snapshot of the whole completion (its final
    parse raises on a `length` or `content_filter` finish, which are answers too)."""
    stream = openai.Stream(cast_to=ChatCompletionChunk, response=_response(pieces, "http://127.0.0.1:9/v1/chat"),
                           client=_OPENAI)
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    chunks = list(stream)
    for ch in chunks:
        state.handle_chunk(ch)
    return state.current_completion_snapshot, chunks


def anthropic_message(pieces: list[bytes]) -> Message:
    """anthropic-sdk-python's `Stream` of raw events, accumulated by its `MessageStream` (what
    `client.messages.stream(...)` does); the final message."""
    raw = anthropic.Stream(cast_to=RawMessageStreamEvent, response=_response(pieces, "http://127.0.0.1:9/v1/messages"),
                           client=_ANTHROPIC)
    with MessageStream(raw, anthropic.NOT_GIVEN) as stream:
        stream.until_done()
        return stream.get_final_message()


class ResponsesRead:
    """`ResponseStreamState` after every event: `snapshot` is the response it built from the deltas."""

    def __init__(self) -> None:
        self.state: ResponseStreamState[None] = ResponseStreamState(input_tools=openai.omit, text_format=openai.omit)

    @property
    def snapshot(self) -> Any:
        return self.state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]  # no public getter


def openai_response(pieces: list[bytes]) -> tuple[ResponsesRead, list[ResponseStreamEvent]]:
    """openai-python's `Stream` of Responses events, accumulated by `ResponseStreamState` (what
    `client.responses.stream(...)` does): the state after the last event, and the events."""
    stream = openai.Stream(cast_to=ResponseStreamEvent,  # type: ignore[arg-type]  # a union, as the SDK passes it
                           response=_response(pieces, "http://127.0.0.1:9/v1/responses"), client=_OPENAI)
    read = ResponsesRead()
    events = list(stream)
    for ev in events:
        read.state.handle_event(ev)
    return read, events
