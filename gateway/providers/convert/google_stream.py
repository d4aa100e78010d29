"""Google `GenerateContentResponse`s (the Gemini API's and Vertex AI's) -> OpenAI `chat.completion.chunk`s
and a `chat.completion`, sans I/O.

A stream (`:streamGenerateContent?alt=sse`) is SSE whose every `data:` is one GenerateContentResponse;
a non-stream answer is one of them. The mapping, per response:

    error                         an InbandError classified by `error.status` (`google_errors`)
    candidates[0].content.parts   `text` -> delta.content; `text` with `thought: true` ->
                                  delta.reasoning_content; `functionCall` -> one whole tool call (its
                                  `id`, or one made up: the Gemini API gives none) with `args` as JSON
    candidates[0].finishReason    the finish chunk: STOP -> stop (tool_calls when the answer called a
                                  tool), MAX_TOKENS -> length, SAFETY / RECITATION / PROHIBITED_CONTENT /
                                  BLOCKLIST / SPII / IMAGE_SAFETY / ... -> content_filter (with a
                                  refusal naming the reason when nothing else was said), then usage
    promptFeedback.blockReason    the prompt was blocked: a refusal naming the reason, content_filter
    usageMetadata                 usage (each response carries the totals so far: the last one wins):
                                  prompt (+ tool-use prompt) -> prompt_tokens, cachedContent ->
                                  cached_tokens, candidates + thoughts -> completion_tokens, thoughts
                                  -> reasoning_tokens
    responseId, modelVersion      the chunks' id and model

There is no end marker: the stream ends with the HTTP body, after the response carrying finishReason;
an end without one is an early end (the stream core's `ended_early`).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import orjson

from gateway.core.events import (
    DeltaKind,
    Failure,
    FailureKind,
    Finish,
    InbandError,
    OutputDelta,
    ToolCallDelta,
    Usage,
)
from gateway.core.sse import SSEEvent
from gateway.providers.base import ChatChunk, ParsedBody, json_value, not_an_object
from gateway.providers.convert.chat_chunks import ChatChunks, completion_body
from gateway.providers.convert.google_errors import classify_google_error, error_object
from gateway.providers.convert.openai_chat import parse_openai_body

FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length", "MALFORMED_FUNCTION_CALL": "stop",
                  "FINISH_REASON_UNSPECIFIED": "stop", "OTHER": "stop", "LANGUAGE": "stop"}
# finish reasons that are a filter's verdict (GenerateContentResponse.Candidate.FinishReason)
FILTERED = frozenset({"SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY",
                      "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"})


def finish_reason(reason: str, called_tool: bool) -> str:
    if reason in FILTERED:
        return "content_filter"
    mapped = FINISH_REASONS.get(reason, "stop")
    return "tool_calls" if called_tool and mapped == "stop" else mapped


def refusal_text(reason: str, prompt: bool) -> str:
    """What a client reads when Google's filter stopped the answer (its reason is an enum name: safe)."""
    what = "the prompt was blocked" if prompt else "the answer was stopped"
    return f"The provider's content filter: {what} ({reason})."


def google_usage(meta: Any) -> Usage | None:
    if not isinstance(meta, dict):
        return None

    def n(key: str) -> int:
        v = meta.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

    thoughts = n("thoughtsTokenCount")
    return Usage(input=n("promptTokenCount") + n("toolUsePromptTokenCount"),
                 output=n("candidatesTokenCount") + thoughts, cached_input=n("cachedContentTokenCount"),
                 reasoning=thoughts)


def call_id(call: dict[str, Any], seed: str, n: int) -> str:
    """The call's own id, else one derived from the answer's id (`seed`) and the call's number, so the
    stream and the body of one answer name it alike."""
    given = call.get("id")
    if isinstance(given, str) and given:
        return given
    return "call_" + hashlib.sha256(f"{seed}/{n}".encode()).hexdigest()[:24]


class GoogleStreamParser:
    """One per attempt: the answer's id and model, the tool-call count, the usage so far."""

    __slots__ = ("_said", "_seed", "_tools", "chunks", "finished", "usage")
    shape = None  # every event is translated

    def __init__(self, created: int) -> None:
        self.chunks = ChatChunks(created)
        self._said = False  # some text or a call came: a filtered finish then needs no refusal
        self._tools = 0
        # the answer's responseId names its calls; without one, a random seed, so that the calls of two
        # answers in one conversation never share an id
        self._seed = secrets.token_hex(8)
        self.finished = False
        self.usage = Usage()

    def parse(self, event: SSEEvent) -> list[ChatChunk]:
        obj = json_value(event.data)
        err = error_object(obj)
        if err is not None:
            return [ChatChunk([InbandError(classify_google_error(err, None))], None)]
        if not isinstance(obj, dict):
            return not_an_object(event.data)
        return self.response(obj)

    def response(self, obj: dict[str, Any]) -> list[ChatChunk]:
        """One GenerateContentResponse -> its chunks."""
        base = self.chunks.base
        if not base["id"] and isinstance(obj.get("responseId"), str) and obj["responseId"]:
            base["id"] = self._seed = obj["responseId"]
        if not base["model"] and isinstance(obj.get("modelVersion"), str):
            base["model"] = obj["modelVersion"]
        usage = google_usage(obj.get("usageMetadata"))
        if usage is not None:
            self.usage = usage
        out = self.chunks.start()
        candidates = obj.get("candidates")
        cand = candidates[0] if isinstance(candidates, list) and candidates else None
        cand = cand if isinstance(cand, dict) else None
        feedback = obj.get("promptFeedback")
        blocked = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if cand is None and isinstance(blocked, str) and blocked and not self.finished:
            return out + self._refuse(blocked, prompt=True) + self._finish("content_filter")
        if cand is None:
            if self.finished and usage is not None:
                out.append(self.chunks.usage(self.usage))  # a late usage update after the finish
            return out
        content = cand.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and not self.finished:
                out += self._part(part)
        reason = cand.get("finishReason")
        if isinstance(reason, str) and reason and not self.finished:
            out += self.finish(reason)
        elif self.finished and usage is not None:
            out.append(self.chunks.usage(self.usage))  # a late usage update after the finish
        return out

    # --- chunks ---

    def _part(self, part: dict[str, Any]) -> list[ChatChunk]:
        text = part.get("text")
        if isinstance(text, str) and text:
            thought = part.get("thought") is True
            self._said = self._said or not thought
            return [self.chunks.text(DeltaKind.REASONING if thought else DeltaKind.CONTENT, text)]
        call = part.get("functionCall")
        if not isinstance(call, dict):
            return []  # executable code, inline data, new part types
        n = self._tools
        self._tools += 1
        self._said = True
        ident = call_id(call, self._seed, n)
        name = str(call.get("name") or "")
        args = orjson.dumps(call.get("args") if isinstance(call.get("args"), dict) else {}).decode()
        return [self.chunks.tool_call(n, ident, name, args)]

    def _refuse(self, reason: str, *, prompt: bool) -> list[ChatChunk]:
        text = refusal_text(reason, prompt)
        self._said = True
        return [self.chunks.text(DeltaKind.REFUSAL, text)]

    def finish(self, google_reason: str) -> list[ChatChunk]:
        """The finish chunk for Google's `finishReason`, and the usage chunk."""
        filtered = google_reason in FILTERED and not self._said
        out = self._refuse(google_reason, prompt=False) if filtered else []
        return out + self._finish(finish_reason(google_reason, self._tools > 0))

    def _finish(self, reason: str) -> list[ChatChunk]:
        self.finished = True
        return [self.chunks.finish(reason), self.chunks.usage(self.usage)]


def parse_google_body(body: bytes, created: int) -> ParsedBody:
    """A GenerateContentResponse -> a `chat.completion` body and its events. A `chat.completion` is read
    as such: the pipeline re-reads the body it already translated."""
    obj = json_value(body)
    err = error_object(obj)
    if err is not None:
        return ParsedBody({}, [InbandError(classify_google_error(err, None))])
    if not isinstance(obj, dict):
        return ParsedBody({}, [InbandError(Failure(FailureKind.MALFORMED, "upstream body is not a JSON object"))])
    if obj.get("object") == "chat.completion":
        return parse_openai_body(body)
    parser = GoogleStreamParser(created)
    chunks = parser.response(obj)
    if not parser.finished:  # a whole answer always says why it ended; be lenient and call it a stop
        chunks += parser.finish("STOP")
    return ParsedBody(_completion(parser, chunks), [e for ch in chunks for e in ch.events])


def _completion(parser: GoogleStreamParser, chunks: list[ChatChunk]) -> dict[str, Any]:
    """The chunks of one whole answer folded into the `chat.completion` they stand for."""
    texts: dict[DeltaKind, list[str]] = {k: [] for k in DeltaKind}
    calls: list[dict[str, Any]] = []
    reason, usage = "stop", Usage()
    for ch in chunks:
        for e in ch.events:
            if isinstance(e, OutputDelta):
                texts[e.kind].append(e.text)
            elif isinstance(e, ToolCallDelta):
                calls.append({"id": e.id, "type": "function", "function": {"name": e.name, "arguments": e.arguments}})
            elif isinstance(e, Finish):
                reason = e.reason
            elif isinstance(e, Usage):
                usage = e
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts[DeltaKind.CONTENT]) or None,
                               "refusal": "".join(texts[DeltaKind.REFUSAL]) or None}
    if texts[DeltaKind.REASONING]:
        message["reasoning_content"] = "".join(texts[DeltaKind.REASONING])
    if calls:
        message["tool_calls"] = calls
    return completion_body(parser.chunks.base, message, reason, usage)

