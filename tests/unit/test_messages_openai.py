"""The Messages <-> Chat Completions translator without a socket: a chat stream read at every split gives
one well-formed Anthropic lifecycle (blocks opened and closed in order, a tool's JSON whole), the same
bytes whatever the split; a secret across content deltas is masked whole; the request is translated."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.providers.convert.messages_chat_request import chat_body
from gateway.providers.messages_openai import OpenAIMessages
from gateway.providers.settings import ProviderConfig
from tests.chat_scripts import chunk, usage_chunk
from tests.unit.model_safety import safety
from tests.unit.reads import pump_reads, splits, the_end
from tests.unit.test_messages_stream import SECRET, events_of, reading, texts

TR = OpenAIMessages(ProviderConfig("oai", "openai", "http://up/v1", "sk-x"))


def sse(objs: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": '}}
BODY = sse([chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "hmm"}),
            chunk({"content": "key "}), chunk({"content": SECRET[:8]}), chunk({"content": SECRET[8:] + " ok"}),
            chunk({"tool_calls": [CALL]}), chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            chunk({}, "tool_calls"), usage_chunk()])


def relay(reads: list[bytes]) -> bytes:
    run = safety(False).start()
    assert run is not None
    stream = MessagesStream(TR.stream_parser(), "oai/x")
    filt = MessagesOutputFilter(run.factory)
    out = pump_reads(stream, filt, reads, must_commit=True)
    out.append(the_end(stream, filt))
    return b"".join(out)


def test_every_split_gives_one_lifecycle_and_the_same_bytes() -> None:
    whole = relay([BODY])
    names = [(o["type"], o.get("index")) for o in events_of(whole)]
    assert names == [("message_start", None), ("content_block_start", 0), ("content_block_delta", 0),
                     ("content_block_stop", 0), ("content_block_start", 1), ("content_block_delta", 1),
                     ("content_block_delta", 1), ("content_block_delta", 1), ("content_block_stop", 1),
                     ("content_block_start", 2),
                     ("content_block_delta", 2), ("content_block_delta", 2), ("content_block_stop", 2),
                     ("message_delta", None), ("message_stop", None)]
    got = texts(whole)
    assert got[(0, "thinking_delta")] == "hmm" and got[(1, "text_delta")] == "key [REDACTED:github_token] ok"
    assert orjson.loads(got[(2, "input_json_delta")]) == {"a": 1}
    end = events_of(whole)[-2]
    assert end["delta"]["stop_reason"] == "tool_use"
    assert end["usage"] == {"input_tokens": 8, "output_tokens": 7, "cache_read_input_tokens": 3,
                            "cache_creation_input_tokens": 0, "output_tokens_details": {"thinking_tokens": 2}}
    for reads in splits(BODY):
        assert reading(relay(reads)) == reading(whole), f"split at {len(reads[0])}"


def test_the_request_is_translated() -> None:
    body = {"model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}}]}],
            "tool_choice": {"type": "tool", "name": "f"}, "tools": [{"name": "f", "input_schema": {}}],
            "metadata": {"user_id": "u" * 300}, "top_k": 3, "thinking": {"type": "enabled", "budget_tokens": 2000}}
    out = chat_body(body)
    assert out["messages"][0] == {"role": "system", "content": "A\n\nB"}
    assert out["messages"][1]["content"] == [{"type": "text", "text": "look"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert not {"metadata", "top_k", "thinking", "model"} & set(out)
    req = TR.request(body, "gpt-dep", stream=True, client_headers={"x-api-key": "client-secret"},
                     send_stream_options=True)
    assert req.url == "http://up/v1/chat/completions" and "client-secret" not in str(req.headers)
    assert orjson.loads(req.body)["model"] == "gpt-dep"
