"""Non-streamed answers: chat completions and embeddings, through the same attempt loop.

The body is masked with the same redaction profile as a stream (one-shot), and every output guardrail
judges the whole answer, whatever its mode: a non-stream client sees nothing before the verdict anyway.
"""

from __future__ import annotations

from typing import Any

from gateway.apis.chat_streamed import fetch_streamed
from gateway.config.types import Deployment
from gateway.core.chat.assemble import ChatAssembler
from gateway.core.chat.wire import TEXT_FIELDS, chunk_events
from gateway.core.events import Usage
from gateway.core.policy.learned import Fact
from gateway.http import Response
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import fetch_body, raise_inband
from gateway.pipeline.attempts import run_attempts
from gateway.pipeline.body import answer_body
from gateway.pipeline.learned import confirm, wants
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import TextMap
from gateway.providers.base import ParsedBody
from gateway.state.base import StateBackend


async def _fetch(rt: Runtime, ctx: RequestContext, d: Deployment) -> ParsedBody:
    tr = rt.translator(d)
    if wants(rt.learned, ctx.fallbacks, d, ctx.api, Fact.STREAM_ONLY):
        streamed = await fetch_streamed(rt, d, tr, ctx.body, ctx.client_headers)
        confirm(rt.learned, ctx.fallbacks, d, ctx.api, Fact.STREAM_ONLY, rt.provider(d).learn_ttl_s)
        return streamed
    req = tr.chat_request(ctx.body, d.model, stream=False, send_stream_options=False)
    parsed = tr.parse_body(await fetch_body(rt, d, req, tr.classify_http_error, ctx.client_headers))
    raise_inband(parsed.events)
    return parsed


async def complete_chat(rt: Runtime, ctx: RequestContext, state: StateBackend) -> Response:
    async def attempt(d: Deployment) -> ParsedBody:
        return await _fetch(rt, ctx, d)

    async def mask(obj: dict[str, Any]) -> int:
        return await redact_body(rt, ctx, obj)

    def read(obj: dict[str, Any]) -> ChatAssembler:
        assembler = ChatAssembler()
        assembler.feed(_events_after_redaction(obj, parsed))
        return assembler

    won, parsed = await run_attempts(rt, ctx, attempt)
    return await answer_body(rt, ctx, state, won, parsed.obj, mask, read)


def _events_after_redaction(obj: dict[str, Any], parsed: ParsedBody) -> list[Any]:
    """The masked body's text (what the client reads, so guardrails judge that), with the usage the
    provider's own parser found. The body is OpenAI-shaped whatever the provider, so it is read as such."""
    usage = [e for e in parsed.events if type(e) is Usage]
    text = [e for e in chunk_events(obj, message_key="message") if type(e) is not Usage]
    return text + usage[-1:]


async def redact_body(rt: Runtime, ctx: RequestContext, obj: dict[str, Any]) -> int:
    def walk(fn: TextMap) -> None:
        for choice in obj.get("choices") or ():
            msg = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(msg, dict):
                continue
            for field, kind in TEXT_FIELDS:
                text = msg.get(field)
                if isinstance(text, str) and text:
                    msg[field] = fn(kind, text)

    counts = await rt.safety.models[ctx.model.name].mask_texts(rt.slicer, walk)
    return ctx.rec.redactions(counts.items())
