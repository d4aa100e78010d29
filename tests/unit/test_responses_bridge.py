"""The Responses bridge's two conversions (CONTRACT §10): a Responses request as the chat body a chat-only
server or the Anthropic cell reads, and a chat stream as Responses events in OpenAI's order, at every split
of its bytes; the `previous_response_id` refusal; the `responses` provider key."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ConfigError, parse_config
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.providers.base import bound, unserved
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat
from gateway.providers.convert.responses_chat_request import chat_body
from gateway.providers.convert.responses_pass_through import ResponsesPassThrough
from gateway.providers.registry import CELLS
from gateway.providers.settings import ProviderConfig
from tests.unit.fidelity import drive, fidelity
from tests.unit.reads import splits

CHAT_ONLY = ProviderConfig("llama", "openai", "http://127.0.0.1:9/v1", "sk-x", responses=False)
CLAUDE = ProviderConfig("claude", "anthropic", "http://127.0.0.1:9", "sk-ant-x")
SHELL = {"type": "function", "name": "shell", "description": "run", "strict": False,
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "edit files",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}


def test_a_codex_style_request_becomes_a_chat_body() -> None:
    body = {
        "model": "m", "instructions": "be brief", "store": False, "stream": True, "include": ["x"],
        "prompt_cache_key": "s1", "reasoning": {"effort": "high", "summary": "auto"}, "max_output_tokens": 99,
        "tools": [SHELL, PATCH, {"type": "web_search"}], "tool_choice": "auto", "parallel_tool_calls": False,
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True},
                 "verbosity": "low"},
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"role": "user", "content": "list files"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sure."}]},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"cmd":"ls"}'},
            {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
            {"type": "custom_tool_call_output", "call_id": "call_2",
             "output": [{"type": "input_text", "text": "done"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}]},
            {"type": "item_reference", "id": "msg_0"},
        ],
    }
    out = chat_body(body)
    assert out["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": "Sure.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"ls"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "apply_patch",
                                                              "arguments": '{"input":"*** Begin"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "done"},
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA",
                                                                         "detail": "low"}}]},
    ]
    assert out["reasoning_effort"] == "high" and out["max_tokens"] == 99
    assert out["tool_choice"] == "auto" and out["parallel_tool_calls"] is False
    assert out["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "out", "schema": {"type": "object"}, "strict": True}}
    shell, patch = out["tools"]  # web_search: a hosted tool no chat server runs
    assert shell == {"type": "function", "function": {"name": "shell", "description": "run", "strict": False,
                                                      "parameters": SHELL["parameters"]}}
    assert patch["function"]["parameters"]["required"] == ["input"]
    assert "start: /.+/" in patch["function"]["description"]
    for dropped in ("store", "include", "text", "input", "instructions", "stream", "model"):
        assert dropped not in out
    assert out["prompt_cache_key"] == body["prompt_cache_key"]  # for OpenAI-type chat servers (docs/caching.md)


@pytest.mark.parametrize(("choice", "want"), [
    ("required", "required"),
    ({"type": "function", "name": "shell"}, {"type": "function", "function": {"name": "shell"}}),
    ({"type": "custom", "name": "apply_patch"}, {"type": "function", "function": {"name": "apply_patch"}}),
    ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"), ({"type": "web_search"}, None),
])
def test_tool_choice(choice: Any, want: Any) -> None:
    assert chat_body({"input": "x", "tools": [SHELL], "tool_choice": choice}).get("tool_choice") == want


def test_a_string_input_and_json_object_format() -> None:
    out = chat_body({"input": "hi", "text": {"format": {"type": "json_object"}}, "reasoning": {"effort": "none"}})
    assert out == {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    obj = {"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m", "choices": choices, **extra}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


STREAM = b"".join([
    _chunk({"role": "assistant", "content": ""}), _chunk({"reasoning_content": "think"}), _chunk({"content": "Hi"}),
    _chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                            "function": {"name": "shell", "arguments": '{"cmd":'}}]}),
    _chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                            "function": {"name": "apply_patch", "arguments": '{"input": "*** Begin'}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"ls"}'}}]}),
    _chunk({"tool_calls": [{"index": 1, "function": {"arguments": '"}'}}]}),
    _chunk({}, "tool_calls"),
    _chunk(None, usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
                        "prompt_tokens_details": {"cached_tokens": 2}}),
])
EVENTS = [
    "response.created", "response.in_progress",
    "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
    "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
    "response.output_item.added", "response.content_part.added", "response.output_text.delta",
    "response.output_text.done", "response.content_part.done", "response.output_item.done",
    "response.output_item.added", "response.function_call_arguments.delta",
    "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
    "response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
    "response.output_item.done", "response.completed",
]


def _client_events(reads: list[bytes], tail: bytes = b"") -> list[dict[str, Any]]:
    tr = bound(ResponsesViaChat(CELLS[("chat", "openai")](CHAT_ONLY)), {"input": "x", "tools": [SHELL, PATCH]})
    stream = ResponsesStream(tr.stream_parser(), "llama/m")
    out = drive(stream, ResponsesOutputFilter(None), [*reads, tail])
    assert stream.terminal is not None
    raw = b"".join([*out, stream.drain(), stream.tail(), stream.finish()])
    return [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: ")]


def test_a_chat_stream_becomes_responses_events_in_order_at_every_split() -> None:
    whole = _client_events([STREAM])
    assert [e["type"] for e in whole] == EVENTS
    assert [e["sequence_number"] for e in whole] == list(range(len(EVENTS)))
    final = whole[-1]["response"]
    assert [(i["type"], i["id"]) for i in final["output"]] == [
        ("reasoning", "rs_c1_0"), ("message", "msg_c1_1"), ("function_call", "fc_c1_2"),
        ("custom_tool_call", "ctc_c1_3")]
    call, custom = final["output"][2:]
    assert (call["call_id"], call["arguments"]) == ("call_a", '{"cmd":"ls"}')
    assert (custom["call_id"], custom["input"]) == ("call_b", "*** Begin")
    assert final["usage"] == {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
                              "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8}
    assert final["tools"] == [SHELL, PATCH], "the request's settings, echoed as OpenAI does"
    for reads in splits(STREAM):
        assert _client_events(reads) == whole


def test_a_stream_that_ends_without_usage_or_done_still_completes() -> None:
    body = _chunk({"content": "Hi"}) + _chunk({}, "length")
    events = _client_events([body])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_chat_body_becomes_the_response_object() -> None:
    tr = bound(ResponsesViaChat(CELLS[("chat", "openai")](CHAT_ONLY)), {"input": "x", "tools": [PATCH]})
    completion = {"id": "c9", "object": "chat.completion", "created": 7, "model": "m", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "ok", "reasoning_content": "hmm", "tool_calls": [
                {"id": "call_z", "type": "function",
                 "function": {"name": "apply_patch", "arguments": '{"input":"patch"}'}}]}}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}
    resp = tr.parse_body(orjson.dumps(completion)).obj
    assert (resp["id"], resp["status"], resp["model"], resp["created_at"]) == ("resp_c9", "completed", "m", 7)
    assert [i["type"] for i in resp["output"]] == ["reasoning", "message", "custom_tool_call"]
    assert resp["output"][1]["content"][0]["text"] == "ok"
    assert resp["output"][2]["input"] == "patch"
    assert resp["usage"]["total_tokens"] == 6


def test_previous_response_id_is_refused_by_a_bridge_only() -> None:
    bridge = CELLS[("responses", "anthropic")](CLAUDE)
    native = CELLS[("responses", "openai")](ProviderConfig("oai", "openai", "http://127.0.0.1:9/v1", "sk-x"))
    assert isinstance(native, ResponsesPassThrough)
    asked = {"input": "x", "previous_response_id": "resp_1"}
    refusal = unserved(bridge, asked)
    assert refusal is not None and refusal.param == "previous_response_id"
    assert "previous_response_id" in refusal.message
    assert unserved(bridge, {"input": "x"}) is None
    assert unserved(native, asked) is None


def test_the_responses_key_is_for_openai_servers_only() -> None:
    def config(provider: dict[str, Any]) -> Any:
        return parse_config({"auth": {"allow_unauthenticated": True}, "providers": {"p": provider},
                             "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}]}]}, env={})

    assert config({"type": "openai", "base_url": "http://h/v1", "responses": False}).providers["p"].responses is False
    assert config({"type": "openai", "base_url": "http://h/v1"}).providers["p"].responses is True
    with pytest.raises(ConfigError, match=r"providers\.p\.responses"):
        config({"type": "anthropic", "base_url": "http://h", "responses": False})


_ITEM = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(min_size=1, max_size=8)),
    st.builds(lambda t: {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]},
              st.text(min_size=1, max_size=8)),
    st.builds(lambda n: [{"type": "function_call", "call_id": f"call_{n}", "name": "f", "arguments": f'{{"n":{n}}}'},
                         {"type": "function_call_output", "call_id": f"call_{n}", "output": f"out {n}"}],
              st.integers(0, 10**6)),
)


@fidelity(200)
@given(st.lists(_ITEM, max_size=8), st.booleans())
def test_any_history_keeps_its_texts_calls_and_outputs_in_order(items: list[Any], parallel: bool) -> None:
    """Every call reaches the chat body once, in an assistant turn before its output; texts keep their order."""
    flat: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, list) and parallel and flat and flat[-1].get("type") == "function_call_output":
            flat.insert(len(flat) - 1, item[0])  # two calls, then both outputs (a parallel turn)
            flat.append(item[1])
        else:
            flat.extend(item if isinstance(item, list) else [item])
    messages = chat_body({"input": flat})["messages"]
    calls = [c["id"] for m in messages for c in m.get("tool_calls", ())]
    assert calls == [i["call_id"] for i in flat if i.get("type") == "function_call"]
    seen: set[str] = set()
    for m in messages:
        seen.update(c["id"] for c in m.get("tool_calls", ()))
        if m["role"] == "tool":
            assert m["tool_call_id"] in seen and m["content"] == f"out {m['tool_call_id'][5:]}"
    texts = [m["content"] for m in messages if m["role"] in ("user", "assistant") and m["content"]]
    want = [i["content"] if isinstance(i["content"], str) else i["content"][0]["text"] for i in flat
            if i.get("role") in ("user", "assistant")]
    assert texts == want
