"""OpenAI Chat Completions request body -> Anthropic Messages request body, sans I/O.

Anthropic rejects fields it does not know, so this is an allowlist, not a pass-through.

Translated: `messages` (system and developer messages -> `system`, in order; assistant `tool_calls` ->
`tool_use` blocks; `tool` messages -> `tool_result` blocks in a user turn; consecutive turns of one
role merged, since Anthropic wants user and assistant to alternate), `max_completion_tokens` /
`max_tokens` (default `DEFAULT_MAX_TOKENS`: Anthropic requires one), `stop` -> `stop_sequences`,
`temperature` (clamped to Anthropic's 0..1), `top_p`, `tools`, `tool_choice` (auto, none, required ->
any, named -> tool), `parallel_tool_calls: false` -> `disable_parallel_tool_use`, `reasoning_effort`
-> `thinking` with a token budget, `user` / `safety_identifier` -> `metadata.user_id`, `stream`.
Content parts: text, image_url (https URL or base64 data URL), file (base64 PDF data URL), and a
`cache_control` on a part, a message or a tool is carried onto the Anthropic block as Anthropic takes it
(`convert.cache_markers.marker`: `ephemeral`, with a `ttl` of 5m or 1h; prompt caching, docs/caching.md).
Anthropic-native fields a client may add to the body: `top_k`, `thinking` (wins over
`reasoning_effort`).
Dropped: everything else, e.g. n, logprobs, top_logprobs, seed, presence_penalty, frequency_penalty,
logit_bias, response_format, stream_options, store, metadata (OpenAI's shape is not Anthropic's),
service_tier (other values), modalities, audio, prediction, web_search_options, verbosity, the legacy
functions/function_call and `function` role, audio parts, and an assistant's `reasoning_content`
(Anthropic needs the thinking block's signature, which the OpenAI shape does not carry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.providers.convert.cache_markers import marker
from gateway.providers.convert.data_url import base64_data
from gateway.providers.convert.tool_arguments import arguments_object

Block = dict[str, Any]
Turn = dict[str, Any]

DEFAULT_MAX_TOKENS = 4096  # every current Claude model can produce at least this many tokens
THINKING_BUDGETS: Mapping[str, int] = {
    "minimal": 1024,  # Anthropic's least budget
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 24576,
}


def anthropic_body(body: Mapping[str, Any], model: str, *, stream: bool) -> dict[str, Any]:
    """The Messages API body for one Chat Completions request, for deployment model `model`."""
    system, turns = convert_messages(body.get("messages"))
    out: dict[str, Any] = {"model": model, "messages": turns}
    if system:
        out["system"] = system
    max_tokens = _positive_int(body.get("max_completion_tokens")) or _positive_int(body.get("max_tokens"))
    out["max_tokens"] = max_tokens or DEFAULT_MAX_TOKENS
    stops = _stop_sequences(body.get("stop"))
    if stops:
        out["stop_sequences"] = stops
    _sampling(body, out)
    tools = _tools(body.get("tools"))
    choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls")) if tools else None
    if tools:
        out["tools"] = tools
    if choice:
        out["tool_choice"] = choice
    forced = choice is not None and choice.get("type") in ("any", "tool")
    _thinking(body, turns, forced, out)
    user = body.get("user") or body.get("safety_identifier")
    if isinstance(user, str) and user:
        out["metadata"] = {"user_id": user}
    if stream:
        out["stream"] = True
    return out


# --- messages ---------------------------------------------------------------------------------------


def convert_messages(raw: Any) -> tuple[list[Block], list[Turn]]:
    """OpenAI messages -> (system blocks, alternating Anthropic turns)."""
    system: list[Block] = []
    turns: list[Turn] = []
    for m in raw if isinstance(raw, list) else ():
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            system.extend(_with_cache_control(_content_blocks(m.get("content"), images=False), m))
        elif role == "user":
            _append(turns, "user", _with_cache_control(_content_blocks(m.get("content"), images=True), m))
        elif role == "assistant":
            _append(turns, "assistant", _with_cache_control(_assistant_blocks(m), m))
        elif role == "tool":
            _append(turns, "user", _with_cache_control([_tool_result(m)], m))
        # the legacy `function` role and unknown roles are dropped: they have no Anthropic equivalent
    _trim_final_assistant(turns)
    return system, turns


def _append(turns: list[Turn], role: str, blocks: list[Block]) -> None:
    """Merge into the previous turn when it has the same role: Anthropic requires alternation."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _trim_final_assistant(turns: list[Turn]) -> None:
    """Anthropic rejects a final (prefill) assistant turn whose text ends in whitespace."""
    if not turns or turns[-1]["role"] != "assistant":
        return
    blocks = turns[-1]["content"]
    if blocks and blocks[-1].get("type") == "text":
        text = blocks[-1]["text"].rstrip()
        if text:
            blocks[-1]["text"] = text
        else:
            blocks.pop()
    if not blocks:
        turns.pop()


def _with_cache_control(blocks: list[Block], message: Mapping[str, Any]) -> list[Block]:
    cc = marker(message.get("cache_control"))
    if cc is not None and blocks:
        blocks[-1]["cache_control"] = cc
    return blocks


def _text_block(text: Any, part: Mapping[str, Any] | None = None) -> list[Block]:
    # Anthropic rejects empty (and whitespace-only) text blocks
    if not isinstance(text, str) or not text.strip():
        return []
    block: Block = {"type": "text", "text": text}
    cc = marker(part.get("cache_control")) if part is not None else None
    if cc is not None:
        block["cache_control"] = cc
    return [block]


def _content_blocks(content: Any, *, images: bool) -> list[Block]:
    if isinstance(content, str):
        return _text_block(content)
    out: list[Block] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        ptype = part.get("type")
        if ptype in ("text", "input_text"):
            out.extend(_text_block(part.get("text"), part))
        elif ptype == "refusal":
            out.extend(_text_block(part.get("refusal"), part))
        elif images and ptype == "image_url":
            out.extend(_image_block(part))
        elif images and ptype == "file":
            out.extend(_document_block(part))
    return out


def _image_block(part: Mapping[str, Any]) -> list[Block]:
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    if not isinstance(url, str) or not url:
        return []
    inline = base64_data(url)
    if inline is not None:
        source: Block = {"type": "base64", "media_type": inline.media_type, "data": inline.data}
    elif url.startswith("data:"):
        return []  # a data URL that is not base64: Anthropic takes only base64
    else:
        source = {"type": "url", "url": url}
    block: Block = {"type": "image", "source": source}
    _mark(block, part)
    return [block]


def _document_block(part: Mapping[str, Any]) -> list[Block]:
    """OpenAI `file` parts with inline data (PDFs). Uploaded file ids mean nothing to Anthropic."""
    ref = part.get("file")
    data = ref.get("file_data") if isinstance(ref, dict) else None
    inline = base64_data(data) if isinstance(data, str) else None
    if inline is None:
        return []
    block: Block = {"type": "document", "source": {"type": "base64", "media_type": inline.media_type,
                                                   "data": inline.data}}
    _mark(block, part)
    return [block]


def _mark(block: Block, part: Mapping[str, Any]) -> None:
    cc = marker(part.get("cache_control"))
    if cc is not None:
        block["cache_control"] = cc


def _assistant_blocks(m: Mapping[str, Any]) -> list[Block]:
    blocks = _content_blocks(m.get("content"), images=False)
    if not blocks:
        blocks = _text_block(m.get("refusal"))
    calls = m.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        assert isinstance(fn, dict)
        blocks.append({"type": "tool_use", "id": str(call.get("id") or ""), "name": str(fn.get("name") or ""),
                       "input": arguments_object(fn.get("arguments"))})
    return blocks


def _tool_result(m: Mapping[str, Any]) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": str(m.get("tool_call_id") or "")}
    content = m.get("content")
    if isinstance(content, str):
        if content:
            block["content"] = content
    else:
        parts = _content_blocks(content, images=True)
        if parts:
            block["content"] = parts
    return block


# --- parameters -------------------------------------------------------------------------------------


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _stop_sequences(stop: Any) -> list[str]:
    items = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    # Anthropic rejects whitespace-only stop sequences
    return [s for s in items if isinstance(s, str) and s.strip()]


def _sampling(body: Mapping[str, Any], out: dict[str, Any]) -> None:
    temperature = _number(body.get("temperature"))
    if temperature is not None:
        out["temperature"] = min(max(temperature, 0.0), 1.0)  # OpenAI allows up to 2
    top_p = _number(body.get("top_p"))
    if top_p is not None:
        out["top_p"] = top_p
    top_k = _positive_int(body.get("top_k"))
    if top_k is not None:
        out["top_k"] = top_k


def _tools(tools: Any) -> list[Block]:
    out: list[Block] = []
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict) or t.get("type", "function") != "function":
            continue  # built-in OpenAI tools (web search, ...) have no Anthropic counterpart here
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters")
        tool: Block = {"name": fn["name"],
                       "input_schema": params if isinstance(params, dict) else {"type": "object", "properties": {}}}
        if isinstance(fn.get("description"), str):
            tool["description"] = fn["description"]
        _mark(tool, t)
        out.append(tool)
    return out


def _tool_choice(choice: Any, parallel: Any) -> Block | None:
    tc: Block | None
    if choice == "none":
        return {"type": "none"}  # disable_parallel_tool_use is not allowed with none
    if choice == "required":
        tc = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        tc = {"type": "tool", "name": str(choice["function"].get("name") or "")}
    elif choice == "auto" or parallel is False:
        tc = {"type": "auto"}
    else:
        return None
    if parallel is False:
        tc["disable_parallel_tool_use"] = True
    return tc


def _thinking(body: Mapping[str, Any], turns: list[Turn], forced_tool: bool, out: dict[str, Any]) -> None:
    """reasoning_effort -> an extended-thinking budget, with max_tokens raised above it (Anthropic
    requires budget < max_tokens; the client's limit stays the room for the answer).

    Thinking stays off when a tool is forced (Anthropic refuses the combination) and when the request
    continues an assistant turn (a tool loop or a prefill): Anthropic then wants the turn to start with
    the earlier thinking block and its signature, which the OpenAI shape cannot carry back.
    """
    thinking = body.get("thinking")
    if not isinstance(thinking, dict):
        effort = body.get("reasoning_effort")
        budget = THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None
        if budget is None or forced_tool or (turns and _continues_assistant_turn(turns)):
            return
        thinking = {"type": "enabled", "budget_tokens": budget}
    out["thinking"] = thinking
    budget = _positive_int(thinking.get("budget_tokens"))
    if budget is not None and out["max_tokens"] <= budget:
        out["max_tokens"] = budget + out["max_tokens"]
    # thinking is incompatible with a changed temperature or top_k, and with top_p below 0.95
    out.pop("temperature", None)
    out.pop("top_k", None)
    if "top_p" in out:
        out["top_p"] = max(out["top_p"], 0.95)


def _continues_assistant_turn(turns: list[Turn]) -> bool:
    last = turns[-1]
    if last["role"] == "assistant":
        return True
    return any(b.get("type") == "tool_result" for b in last["content"])
