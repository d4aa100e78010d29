"""OpenAI Chat Completions request body -> Google `generateContent` body (the Gemini API and Vertex AI's
Gemini models share it), sans I/O.

An allowlist: Google rejects fields it does not know.

Translated: `messages` (system and developer messages -> `systemInstruction`; user -> `user` turns;
assistant -> `model` turns with text and `functionCall` parts; `tool` messages -> `functionResponse`
parts in a `user` turn, named after the call they answer, since Google pairs a response with its call
by name and order), consecutive turns of one role merged; `tools` -> one `functionDeclarations` tool
(parameters as `parametersJsonSchema`: the JSON Schema as the client wrote it); `tool_choice` ->
`toolConfig.functionCallingConfig` (auto -> AUTO, none -> NONE, required -> ANY, named -> ANY with
`allowedFunctionNames`); `temperature`, `top_p`, `top_k`, `max_completion_tokens` / `max_tokens`,
`stop`, `seed`, `presence_penalty`, `frequency_penalty`, `response_format` -> `generationConfig`;
`reasoning_effort`, or the Anthropic-shaped `thinking` a Messages client sends (its budget) ->
`generationConfig.thinkingConfig` with the thoughts included.
Content parts: text, image_url (a base64 data URL -> `inlineData`; a URL -> `fileData`), file (a base64
data URL -> `inlineData`).
Dropped: n, logprobs, logit_bias, user, metadata, store, stream_options, modalities, audio, the legacy
functions, an assistant's `reasoning_content` (Google wants its own signed thoughts back, which the
OpenAI shape does not carry), and anything else.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Mapping
from typing import Any

from gateway.providers.convert.data_url import base64_data
from gateway.providers.convert.tool_arguments import arguments_object

Part = dict[str, Any]
Content = dict[str, Any]

THINKING_BUDGETS: Mapping[str, int] = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576,
                                       "xhigh": 32768}
# Gemini 3 validates the thought signature of a model turn's first function call; a call replayed from
# a client's history has none (the OpenAI and Anthropic shapes do not carry it), and Google documents
# this value for history it did not sign ("Thought signatures", Gemini API docs).
UNSIGNED_THOUGHT = "skip_thought_signature_validator"


def google_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The generateContent body for one Chat Completions request (the model is in the URL)."""
    system, contents = convert_messages(body.get("messages"))
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": system}
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = [{"functionDeclarations": tools}]
        config = _tool_config(body.get("tool_choice"))
        if config is not None:
            out["toolConfig"] = {"functionCallingConfig": config}
    generation = _generation_config(body)
    if generation:
        out["generationConfig"] = generation
    return out


# --- messages ---------------------------------------------------------------------------------------


def convert_messages(raw: Any) -> tuple[list[Part], list[Content]]:
    """OpenAI messages -> (system parts, Google contents with roles user/model)."""
    system: list[Part] = []
    contents: list[Content] = []
    names: dict[str, str] = {}  # tool call id -> function name, for the responses
    for m in raw if isinstance(raw, list) else ():
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            system.extend(_parts(m.get("content"), media=False))
        elif role == "user":
            _append(contents, "user", _parts(m.get("content"), media=True))
        elif role == "assistant":
            _append(contents, "model", _model_parts(m, names))
        elif role == "tool":
            _append(contents, "user", [_function_response(m, names)])
    return system, contents


def _append(contents: list[Content], role: str, parts: list[Part]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _parts(content: Any, *, media: bool) -> list[Part]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    out: list[Part] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        ptype = part.get("type")
        if ptype in ("text", "input_text") and isinstance(part.get("text"), str) and part["text"]:
            out.append({"text": part["text"]})
        elif ptype == "refusal" and isinstance(part.get("refusal"), str) and part["refusal"]:
            out.append({"text": part["refusal"]})
        elif media and ptype == "image_url":
            ref = part.get("image_url")
            out.extend(_media(ref.get("url") if isinstance(ref, dict) else ref, "image/jpeg"))
        elif media and ptype == "file":
            ref = part.get("file")
            data = ref.get("file_data") if isinstance(ref, dict) else None
            out.extend(_media(data, None))
    return out


def _media(url: Any, default_type: str | None) -> list[Part]:
    """A base64 data URL -> `inlineData`; an http(s) or gs:// URL -> `fileData` (a file id means nothing
    to Google, and a data URL that is not base64 cannot be sent)."""
    if not isinstance(url, str) or not url:
        return []
    inline = base64_data(url)
    if inline is not None:
        return [{"inlineData": {"mimeType": inline.media_type, "data": inline.data}}]
    if default_type is None or not url.startswith(("https://", "http://", "gs://")):
        return []
    guessed = mimetypes.guess_type(url.split("?", 1)[0])[0]
    return [{"fileData": {"mimeType": guessed or default_type, "fileUri": url}}]


def _model_parts(m: Mapping[str, Any], names: dict[str, str]) -> list[Part]:
    parts = _parts(m.get("content"), media=False)
    if not parts and isinstance(m.get("refusal"), str) and m["refusal"]:
        parts = [{"text": m["refusal"]}]
    first_call = True
    calls = m.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            continue
        name = str(fn.get("name") or "")
        if isinstance(call.get("id"), str):
            names[call["id"]] = name
        part: Part = {"functionCall": {"name": name, "args": arguments_object(fn.get("arguments"))}}
        if first_call:
            part["thoughtSignature"] = UNSIGNED_THOUGHT
            first_call = False
        parts.append(part)
    return parts


def _function_response(m: Mapping[str, Any], names: Mapping[str, str]) -> Part:
    """A tool result: its JSON object as the response when it is one, else its text as `result`."""
    content = m.get("content")
    text = content if isinstance(content, str) else "".join(
        str(p.get("text") or "") for p in content if isinstance(p, dict)) if isinstance(content, list) else ""
    response = arguments_object(text) if text.lstrip().startswith("{") else {}
    call_id = m.get("tool_call_id")
    name = names.get(call_id, "") if isinstance(call_id, str) else ""
    return {"functionResponse": {"name": name or str(m.get("name") or ""),
                                 "response": response or {"result": text}}}


# --- tools and parameters ---------------------------------------------------------------------------


def _tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict) or t.get("type", "function") != "function":
            continue  # OpenAI's built-in tools have no Google counterpart here
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        decl: dict[str, Any] = {"name": fn["name"]}
        if isinstance(fn.get("description"), str):
            decl["description"] = fn["description"]
        params = fn.get("parameters")
        if isinstance(params, dict) and params.get("properties"):
            decl["parametersJsonSchema"] = params
        out.append(decl)
    return out


def _tool_config(choice: Any) -> dict[str, Any] | None:
    if choice == "none":
        return {"mode": "NONE"}
    if choice == "auto":
        return {"mode": "AUTO"}
    if choice == "required":
        return {"mode": "ANY"}
    fn = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return {"mode": "ANY", "allowedFunctionNames": [fn["name"]]}
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


_NUMBERS = (("temperature", "temperature"), ("top_p", "topP"), ("presence_penalty", "presencePenalty"),
            ("frequency_penalty", "frequencyPenalty"))


def _generation_config(body: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for src, dst in _NUMBERS:
        value = _number(body.get(src))
        if value is not None:
            out[dst] = value
    for src, dst in (("top_k", "topK"), ("seed", "seed")):
        if (iv := _int(body.get(src))) is not None:
            out[dst] = iv
    limit = _int(body.get("max_completion_tokens")) or _int(body.get("max_tokens"))
    if limit is not None and limit > 0:
        out["maxOutputTokens"] = limit
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    stops = [s for s in stops if isinstance(s, str) and s]
    if stops:
        out["stopSequences"] = stops[:5]  # Google takes at most 5
    out.update(_response_format(body.get("response_format")))
    thinking = _thinking(body)
    if thinking is not None:
        out["thinkingConfig"] = thinking
    return out


def _response_format(fmt: Any) -> dict[str, Any]:
    if not isinstance(fmt, dict):
        return {}
    if fmt.get("type") == "json_object":
        return {"responseMimeType": "application/json"}
    schema = fmt.get("json_schema")
    if fmt.get("type") == "json_schema" and isinstance(schema, dict) and isinstance(schema.get("schema"), dict):
        return {"responseMimeType": "application/json", "responseJsonSchema": schema["schema"]}
    return {}


def _thinking(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """Anthropic's `thinking` (a Messages client's; its budget wins) or `reasoning_effort` -> a thinking
    budget with the thoughts included in the answer; `disabled` / `none` -> no thinking asked for."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        budget = _int(thinking.get("budget_tokens"))
        if thinking.get("type") in ("enabled", "adaptive"):
            return {"includeThoughts": True, **({"thinkingBudget": budget} if budget else {})}
        return None
    effort = body.get("reasoning_effort")
    budget = THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None
    return {"includeThoughts": True, "thinkingBudget": budget} if budget is not None else None
