"""Builders of OpenAI Chat Completions upstream answers for the fake upstream."""

from __future__ import annotations

from typing import Any

from tests.fake_upstream import Part, Script, json_script, sse

MODEL = "up-model-2025-01-01"
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
         "prompt_tokens_details": {"cached_tokens": 3}, "completion_tokens_details": {"reasoning_tokens": 2}}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, index: int = 0,
          cid: str = "chatcmpl-up", **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "delta": delta if delta is not None else {}, "finish_reason": finish}
    return {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": MODEL, "choices": [choice], **extra}


def usage_chunk(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": MODEL, "choices": [],
            "usage": usage or USAGE}


def text_stream(pieces: list[str], *, usage: str = "separate", done: bool = True, finish: str = "stop",
                cid: str = "chatcmpl-up", split: int = 0) -> Script:
    """usage: "separate" (OpenAI include_usage), "finish" (on the finish chunk, Mistral), "none"."""
    parts: list[Part] = [sse(chunk({"role": "assistant", "content": ""}, cid=cid))]
    parts += [sse(chunk({"content": p}, cid=cid)) for p in pieces]
    if usage == "finish":
        parts.append(sse(chunk({}, finish, cid=cid, usage=USAGE)))
    else:
        parts.append(sse(chunk({}, finish, cid=cid)))
        if usage == "separate":
            parts.append(sse(usage_chunk()))
    if done:
        parts.append(b"data: [DONE]\n\n")
    return Script(parts, split=split)


def completion(content: str | None = "Hello there", *, n: int = 1, usage: dict[str, Any] | None = None,
               tool_calls: list[dict[str, Any]] | None = None) -> Script:
    choices = []
    for i in range(n):
        msg: dict[str, Any] = {"role": "assistant", "content": content if n == 1 else f"{content} #{i}"}
        if tool_calls:
            msg["tool_calls"] = tool_calls
        choices.append({"index": i, "message": msg, "finish_reason": "tool_calls" if tool_calls else "stop"})
    return json_script({"id": "chatcmpl-body", "object": "chat.completion", "created": 1, "model": MODEL,
                        "choices": choices, "usage": usage or USAGE})


def error_script(status: int, code: str | None, message: str = "upstream says no", etype: str = "invalid_request_error",
                 param: str | None = None, headers: dict[str, str] | None = None) -> Script:
    return json_script({"error": {"message": message, "type": etype, "param": param, "code": code}}, status,
                       headers)
