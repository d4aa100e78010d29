"""Anthropic Messages request body -> OpenAI Chat Completions request body, sans I/O.

The other direction of `convert.anthropic_request`. OpenAI-compatible servers reject or ignore fields they
do not know, so this is an allowlist.

Translated: `system` (a string or text blocks) -> a system message; `messages`: text blocks -> text
parts, `image` blocks (base64 or URL) -> `image_url` parts, an assistant's `tool_use` blocks ->
`tool_calls` (input as a JSON string), a user's `tool_result` blocks -> `tool` messages (placed before
the rest of that user turn, as OpenAI wants a tool result right after its call); `max_tokens`,
`stop_sequences` -> `stop`, `temperature`, `top_p`, `tools` (custom tools -> functions with
`input_schema` as `parameters`), `tool_choice` (auto, any -> required, tool -> named function, none;
`disable_parallel_tool_use` -> `parallel_tool_calls: false`), `stream`.
Dropped: `thinking` and assistant `thinking` / `redacted_thinking` blocks (OpenAI's shape has no signed
thinking, and `reasoning_effort` is refused by models that do not reason), `top_k`, `metadata`
(Claude Code's `user_id` is longer than OpenAI's identifiers allow), `cache_control`, `citations`,
documents, server tools (`web_search_*`, `bash_*`, ... which OpenAI cannot run), `context_management`,
`output_config`, `service_tier`, `container`, `mcp_servers` and anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.providers.convert.data_url import data_url

Message = dict[str, Any]


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Chat Completions body for one Messages request (model and stream are the translator's)."""
    out: dict[str, Any] = {"messages": _system(body.get("system")) + _messages(body.get("messages"))}
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        out["max_tokens"] = max_tokens
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and stops:
        out["stop"] = [s for s in stops if isinstance(s, str)][:4]  # OpenAI takes at most 4
    for key in ("temperature", "top_p"):
        v = body.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[key] = v
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
        _tool_choice(body.get("tool_choice"), out)
    return out


def _text(blocks: Any) -> str:
    if isinstance(blocks, str):
        return blocks
    parts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
             and isinstance(b.get("text"), str)] if isinstance(blocks, list) else []
    return "\n\n".join(parts)


def _system(system: Any) -> list[Message]:
    text = _text(system)
    return [{"role": "system", "content": text}] if text else []


def _messages(raw: Any) -> list[Message]:
    out: list[Message] = []
    for m in raw if isinstance(raw, list) else ():
        if not isinstance(m, dict):
            continue
        role, content = m.get("role"), m.get("content")
        if role == "assistant":
            out.append(_assistant(content))
        elif role == "user":
            out.extend(_user(content))
    return out


def _assistant(content: Any) -> Message:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for b in content if isinstance(content, list) else ():
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text" and isinstance(b.get("text"), str):
            texts.append(b["text"])
        elif b.get("type") == "tool_use":
            args = orjson.dumps(b.get("input") if isinstance(b.get("input"), dict) else {}).decode()
            calls.append({"id": str(b.get("id") or ""), "type": "function",
                          "function": {"name": str(b.get("name") or ""), "arguments": args}})
    msg: Message = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user(content: Any) -> list[Message]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tools: list[Message] = []
    parts: list[dict[str, Any]] = []
    for b in content if isinstance(content, list) else ():
        if not isinstance(b, dict):
            continue
        btype = b.get("type")
        if btype == "tool_result":
            text = _text(b.get("content"))
            tools.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id") or ""),
                          "content": f"Error: {text}" if b.get("is_error") is True else text})
        elif btype == "text" and isinstance(b.get("text"), str):
            parts.append({"type": "text", "text": b["text"]})
        elif btype == "image":
            parts.extend(_image(b.get("source")))
    out = tools
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts) if only_text else parts})
    return out


def _image(source: Any) -> list[dict[str, Any]]:
    if not isinstance(source, dict):
        return []
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        url = data_url(str(source.get("media_type") or "image/png"), source["data"])
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        return []
    return [{"type": "image_url", "image_url": {"url": url}}]


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for t in tools if isinstance(tools, list) else ():
        # a custom tool has no `type` or type "custom"; typed ones are Anthropic's server tools
        if not isinstance(t, dict) or t.get("type", "custom") != "custom" or not isinstance(t.get("name"), str):
            continue
        schema = t.get("input_schema")
        fn: dict[str, Any] = {"name": t["name"],
                              "parameters": schema if isinstance(schema, dict) else {"type": "object"}}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any, out: dict[str, Any]) -> None:
    if not isinstance(choice, dict):
        return
    ctype = choice.get("type")
    if ctype == "auto":
        out["tool_choice"] = "auto"
    elif ctype == "any":
        out["tool_choice"] = "required"
    elif ctype == "none":
        out["tool_choice"] = "none"
    elif ctype == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    if choice.get("disable_parallel_tool_use") is True and ctype != "none":
        out["parallel_tool_calls"] = False
