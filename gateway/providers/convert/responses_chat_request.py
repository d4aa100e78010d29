"""OpenAI Responses request body -> OpenAI Chat Completions request body, sans I/O (the Responses bridge,
docs/responses-bridge.md).

Chat servers reject or ignore fields they do not know, so this is an allowlist.

Translated: `instructions` -> a leading system message; `input` as a string -> a user message; input
items: messages (`type: "message"` or the short `{role, content}`; `developer` -> `system`, which every
chat server and the Anthropic cell read), content parts (`input_text` / `output_text` / `refusal` -> text,
`input_image` -> `image_url`, `input_file` with `file_data` -> a `file` part), `function_call` and
`custom_tool_call` -> an assistant message's `tool_calls` (consecutive calls, and a call right after an
assistant's text, in one message, as Chat Completions wants a turn's calls together), `function_call_output`
/ `custom_tool_call_output` -> `tool` messages; `tools`: `function` -> a chat function, `custom` (free-form
input) -> a chat function with one string parameter `input`, its description telling the grammar when it
has one; `tool_choice` (auto, none, required, a named function or custom tool, `allowed_tools` by its
mode), `parallel_tool_calls`, `text.format` (`json_object`, `json_schema`) -> `response_format`,
`reasoning.effort` -> `reasoning_effort`, `max_output_tokens` -> `max_tokens`, `temperature`, `top_p`,
`safety_identifier` / `user` -> `user`.
Dropped: `reasoning` input items (a chat request has no field for earlier reasoning; the Anthropic cell
turns thinking off for a continued tool loop for the same reason), `item_reference` (it names stored
state; one naming an item the caller was not given was refused before any attempt, whatever the
provider: `pipeline.ownership`), hosted tools (`web_search`, `file_search`, `code_interpreter`, `mcp`,
...: a chat server cannot run them), `include`, `store`, `truncation`, `background`, `text.verbosity`,
`stream_options`, `metadata`, `service_tier`.
Prompt caching (docs/caching.md): `prompt_cache_key` and `prompt_cache_retention` go to the chat body (an
OpenAI-type chat server takes them; the Anthropic conversion drops them), and a `cache_control` on a
content part (a tool output's parts included), a message or tool output item, or a tool is kept on the chat
part, message or tool, where the Anthropic conversion reads it (a marked text keeps its parts instead of
being joined into one string).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson

Message = dict[str, Any]

CUSTOM_INPUT = "input"  # the one parameter of a custom tool's chat function: its free-form input
_SETTINGS = ("instructions", "max_output_tokens", "parallel_tool_calls", "reasoning", "temperature", "text",
             "tool_choice", "tools", "top_p", "truncation", "metadata", "store", "user", "safety_identifier",
             "prompt_cache_key", "service_tier")


@dataclass(frozen=True, slots=True)
class Echo:
    """What the answer must know of its request: the custom tools (their calls come back as
    `custom_tool_call` items) and the settings the final `response` object repeats, as OpenAI's does."""

    custom_tools: frozenset[str] = frozenset()
    settings: Mapping[str, Any] | None = None


def echo_of(body: Mapping[str, Any]) -> Echo:
    tools = body.get("tools")
    custom = frozenset(t["name"] for t in tools if isinstance(t, dict) and t.get("type") == "custom"
                       and isinstance(t.get("name"), str)) if isinstance(tools, list) else frozenset()
    return Echo(custom, {k: body[k] for k in _SETTINGS if k in body})


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Chat Completions body for one Responses request (model and stream are the chat cell's)."""
    messages = _instructions(body.get("instructions")) + _input(body.get("input"))
    out: dict[str, Any] = {"messages": messages}
    max_tokens = body.get("max_output_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        out["max_tokens"] = max_tokens
    for key in ("temperature", "top_p"):
        v = body.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[key] = v
    user = body.get("safety_identifier") or body.get("user")
    if isinstance(user, str) and user:
        out["user"] = user
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if isinstance(effort, str) and effort != "none":
        out["reasoning_effort"] = effort
    _text_format(body.get("text"), out)
    for key in ("prompt_cache_key", "prompt_cache_retention"):
        if isinstance(body.get(key), str):
            out[key] = body[key]
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
        _tool_choice(body.get("tool_choice"), out)
        if isinstance(body.get("parallel_tool_calls"), bool):
            out["parallel_tool_calls"] = body["parallel_tool_calls"]
    return out


def _instructions(text: Any) -> list[Message]:
    return [{"role": "system", "content": text}] if isinstance(text, str) and text else []


def _input(value: Any) -> list[Message]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        return []
    memo = INPUT_MEMO.get()
    if memo is not None:
        return memo.translated(value)
    return _folded(value, [])


def _folded(items: list[Any], out: list[Message]) -> list[Message]:
    for item in items:
        if isinstance(item, dict):
            _item(item, out)
    return out


class InputMemo:
    """A conversation's input items and the chat messages they translated to, kept between its requests
    by a transport that sends the same item objects again with a few new ones after them (WebSocket mode
    keeps the conversation: docs/reference.md, WebSocket mode). A request whose items begin with the
    kept ones, the same objects, translates only its new ones. Sound because neither side is changed
    in place: the pipeline never changes the items a transport lends it, no chat cell changes the messages
    it is given (tests/unit/test_chat_cells_leave_messages.py), and the one message a later item may
    still add a tool call to, the last, is copied before it can."""

    __slots__ = ("_items", "_messages")

    def __init__(self) -> None:
        self._items: tuple[Any, ...] = ()
        self._messages: list[Message] = []

    def translated(self, items: list[Any]) -> list[Message]:
        kept = self._items
        if kept and len(items) >= len(kept) and all(a is b for a, b in zip(kept, items[:len(kept)], strict=True)):
            out = list(self._messages)
            if out and out[-1]["role"] == "assistant":  # `_call` adds a call to it, in place
                out[-1] = _copied(out[-1])
            _folded(items[len(kept):], out)
        else:
            out = _folded(items, [])
        self._items, self._messages = tuple(items), list(out)
        return out


def _copied(message: Message) -> Message:
    calls = message.get("tool_calls")
    return {**message, "tool_calls": list(calls)} if isinstance(calls, list) else dict(message)


# the memo of the conversation a request belongs to, when its transport keeps one (set per response task)
INPUT_MEMO: ContextVar[InputMemo | None] = ContextVar("responses_input_memo", default=None)


def _item(item: dict[str, Any], out: list[Message]) -> None:
    itype = item.get("type", "message")
    if itype == "message":
        msg = _message(item)
        if msg is not None:
            out.append(msg)
    elif itype == "function_call":
        _call(out, item.get("call_id"), item.get("name"), item.get("arguments"))
    elif itype == "custom_tool_call":
        value = item.get("input")
        args = orjson.dumps({CUSTOM_INPUT: value if isinstance(value, str) else ""}).decode()
        _call(out, item.get("call_id"), item.get("name"), args)
    elif itype in ("function_call_output", "custom_tool_call_output"):
        out.append(_marked({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                            "content": _output_text(item.get("output"))}, item))


def _message(item: dict[str, Any]) -> Message | None:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        return None
    return _marked(_message_content(role, item.get("content")), item)


def _message_content(role: str, content: Any) -> Message:
    if isinstance(content, str):
        return {"role": "system" if role == "developer" else role, "content": content}
    parts = [p for part in (content if isinstance(content, list) else ()) for p in _part(part)]
    marked = any("cache_control" in p for p in parts)
    if role != "user":  # system and assistant turns are text in every chat server
        texts = [p for p in parts if p["type"] == "text"]
        return {"role": "system" if role == "developer" else role,
                "content": texts if marked else "".join(p["text"] for p in texts)}
    if not marked and all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": "".join(p["text"] for p in parts)}
    return {"role": "user", "content": parts}


def _marked(out: dict[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """`out` with the `cache_control` its Responses source carries (a prompt-cache marker), if any."""
    if isinstance(source.get("cache_control"), dict):
        out["cache_control"] = source["cache_control"]
    return out


def _part(part: Any) -> list[dict[str, Any]]:
    if not isinstance(part, dict):
        return []
    ptype = part.get("type")
    if ptype in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
        return [_marked({"type": "text", "text": part["text"]}, part)]
    if ptype == "refusal" and isinstance(part.get("refusal"), str):
        return [_marked({"type": "text", "text": part["refusal"]}, part)]
    if ptype == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail") in ("low", "high", "auto"):
            image["detail"] = part["detail"]
        return [_marked({"type": "image_url", "image_url": image}, part)]
    if ptype == "input_file" and isinstance(part.get("file_data"), str):
        file = {"file_data": part["file_data"]}
        if isinstance(part.get("filename"), str):
            file["filename"] = part["filename"]
        return [_marked({"type": "file", "file": file}, part)]
    return []


def _output_text(output: Any) -> str | list[dict[str, Any]]:
    """A tool's output: a string, or content parts (their text, joined; kept as text parts when one carries a
    `cache_control`, so the marker reaches the `tool_result`'s content as a chat `tool` message's would)."""
    if isinstance(output, str):
        return output
    texts = [p for part in (output if isinstance(output, list) else ()) for p in _part(part) if p["type"] == "text"]
    return texts if any("cache_control" in p for p in texts) else "".join(p["text"] for p in texts)


def _call(out: list[Message], call_id: Any, name: Any, arguments: Any) -> None:
    call = {"id": str(call_id or ""), "type": "function",
            "function": {"name": str(name or ""), "arguments": arguments if isinstance(arguments, str) else "{}"}}
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        return
    out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            continue
        if t.get("type") == "function":
            params = t.get("parameters")
            fn: dict[str, Any] = {"name": t["name"],
                                  "parameters": params if isinstance(params, dict) else {"type": "object",
                                                                                          "properties": {}}}
            if isinstance(t.get("description"), str):
                fn["description"] = t["description"]
            if isinstance(t.get("strict"), bool):
                fn["strict"] = t["strict"]
            out.append(_marked({"type": "function", "function": fn}, t))
        elif t.get("type") == "custom":
            out.append(_marked({"type": "function", "function": _custom(t)}, t))
    return out


def _custom(t: dict[str, Any]) -> dict[str, Any]:
    given = t.get("description")
    description = given if isinstance(given, str) else ""
    fmt = t.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        syntax = fmt.get("syntax") if isinstance(fmt.get("syntax"), str) else "lark"
        description += f"\n\nThe `{CUSTOM_INPUT}` string must follow this {syntax} grammar:\n{fmt['definition']}"
    params = {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}}, "required": [CUSTOM_INPUT],
              "additionalProperties": False}
    return {"name": t["name"], "description": description.strip(), "parameters": params}


def _tool_choice(choice: Any, out: dict[str, Any]) -> None:
    if choice in ("auto", "none", "required"):
        out["tool_choice"] = choice
    elif isinstance(choice, dict):
        ctype = choice.get("type")
        if ctype in ("function", "custom") and isinstance(choice.get("name"), str):
            out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        elif ctype == "allowed_tools" and choice.get("mode") in ("auto", "required"):
            out["tool_choice"] = choice["mode"]


def _text_format(text: Any, out: dict[str, Any]) -> None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return
    if fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        schema: dict[str, Any] = {"name": fmt.get("name") if isinstance(fmt.get("name"), str) else "response",
                                  "schema": fmt["schema"]}
        for key in ("strict", "description"):
            if key in fmt:
                schema[key] = fmt[key]
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
