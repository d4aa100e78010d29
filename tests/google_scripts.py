"""Google GenerateContentResponses as the Gemini API and Vertex AI send them: builders for unit tests and
the scripted upstream (`tests/fake_google.py`). Field names and shapes are the REST API's
(ai.google.dev/api/generate-content, cloud.google.com/vertex-ai/docs/reference/rest)."""

from __future__ import annotations

from typing import Any

import orjson

MODEL = "gemini-2.5-flash"
RESPONSE_ID = "resp-1"


def response(parts: list[dict[str, Any]] | None = None, finish: str | None = None,
             usage: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"responseId": RESPONSE_ID, "modelVersion": MODEL}
    if parts is not None or finish is not None:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts or []}, "index": 0}
        if finish is not None:
            cand["finishReason"] = finish
        out["candidates"] = [cand]
    if usage is not None:
        out["usageMetadata"] = usage
    out.update(extra)
    return out


def text(t: str, thought: bool = False) -> dict[str, Any]:
    return {"text": t, "thought": True} if thought else {"text": t}


def call(name: str, args: dict[str, Any], ident: str | None = None) -> dict[str, Any]:
    fc: dict[str, Any] = {"name": name, "args": args}
    if ident is not None:
        fc["id"] = ident
    return {"functionCall": fc, "thoughtSignature": "c2ln"}


def usage(prompt: int = 10, candidates: int = 5, cached: int = 0, thoughts: int = 0) -> dict[str, int]:
    u = {"promptTokenCount": prompt, "candidatesTokenCount": candidates,
         "totalTokenCount": prompt + candidates + thoughts}
    if cached:
        u["cachedContentTokenCount"] = cached
    if thoughts:
        u["thoughtsTokenCount"] = thoughts
    return u


def error(status: str, code: int, message: str = "no", retry_s: str | None = None,
          reason: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message, "status": status}
    details: list[dict[str, Any]] = []
    if retry_s is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_s})
    if reason is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                        "domain": "googleapis.com"})
    if details:
        err["details"] = details
    return {"error": err}


def sse(events: list[dict[str, Any]]) -> bytes:
    """`alt=sse` framing: one `data:` line per response, CRLF-free, as Google writes it."""
    return b"".join(b"data: " + orjson.dumps(e) + b"\r\n\r\n" for e in events)


def text_stream(pieces: list[str], u: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """A streamed text answer: every response with the usage so far, the last with STOP."""
    out = [response([text(p)], usage=usage(candidates=i + 1)) for i, p in enumerate(pieces[:-1])]
    out.append(response([text(pieces[-1])], "STOP", u or usage(candidates=len(pieces))))
    return out
