"""Thin route handlers: parse once, authenticate, resolve the model, hand to the pipeline."""

from __future__ import annotations

from typing import Any

from gateway import cache
from gateway.auth import KeyRing
from gateway.chat_body import complete_chat, embeddings
from gateway.chat_handler import stream_chat
from gateway.context import RequestContext
from gateway.core.json_body import BodyError, parse_object
from gateway.errors import InvalidRequest, ModelNotFound, Unavailable
from gateway.guardrails import check_input
from gateway.inbound import Request, Response, StreamResponse, json_response
from gateway.limits import admit
from gateway.runtime import Runtime


def read_json(request: Request) -> dict[str, Any]:
    """The body as a JSON object. Its size was bounded while it was read (`server.max_body_bytes`), its
    depth is bounded here (`core.json_body`)."""
    try:
        return parse_object(request.body)
    except BodyError as exc:
        raise InvalidRequest(str(exc)) from None


async def resolve(request: Request, api: str) -> tuple[Runtime, RequestContext]:
    rt = request.app.runtime
    key = rt.keyring.authenticate(request.headers)
    body = read_json(request)
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("you must provide a model parameter", param="model")
    model = rt.model(name)
    if model is None:
        raise ModelNotFound(f"the model {name!r} does not exist", param="model")
    KeyRing.authorize(key, model.name)
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("stream must be a boolean", param="stream")
    opts = body.get("stream_options")
    forward_usage = isinstance(opts, dict) and opts.get("include_usage") is True
    ctx = RequestContext(request_id=request.request_id, api=api, model=model, body=body,
                         stream=bool(stream), key=key, forward_usage=forward_usage, t_start=request.t0)
    request.ctx = ctx
    return rt, ctx


def _messages_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages must be an array", param="messages")
    for m in messages:
        if not isinstance(m, dict):
            raise InvalidRequest("each message must be an object", param="messages")
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "\n".join(parts)


def _redact_inputs(rt: Runtime, ctx: RequestContext) -> None:
    """`redaction.inputs: true`: mask secrets in the prompt before it leaves for the provider."""
    safety = rt.safety.models[ctx.model.name]
    if not safety.redact_inputs or safety.redactor is None:
        return
    for m in ctx.body.get("messages") or ():
        content = m.get("content")
        if isinstance(content, str):
            m["content"] = safety.redactor.redact(content).text
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    part["text"] = safety.redactor.redact(part["text"]).text


async def chat_completions(request: Request) -> Response | StreamResponse:
    rt, ctx = await resolve(request, "chat")
    text = _messages_text(ctx.body)
    _redact_inputs(rt, ctx)
    state = request.app.state
    await admit(rt, state, ctx)
    await check_input(rt, ctx, text)
    if cache.wanted(rt, request, ctx):
        hit = await cache.lookup(state, ctx)
        if hit is not None:
            return await cache.serve_hit(request, ctx, hit)
        ctx.cache_store = True
    if ctx.stream:
        return await stream_chat(request, rt, ctx)
    return await complete_chat(rt, ctx, state)


async def embeddings_handler(request: Request) -> Response | StreamResponse:
    rt, ctx = await resolve(request, "embeddings")
    if "input" not in ctx.body:
        raise InvalidRequest("you must provide an input parameter", param="input")
    await admit(rt, request.app.state, ctx)
    return await embeddings(rt, ctx)


async def list_models(request: Request) -> Response:
    rt = request.app.runtime
    key = rt.keyring.authenticate(request.headers)
    names = KeyRing.visible(key, list(rt.config.models))
    data = [{"id": n, "object": "model", "created": 0, "owned_by": "llm-gateway"} for n in names]
    return json_response({"object": "list", "data": data})


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    state = request.app.state
    if not await state.healthy():
        raise Unavailable("the state backend is not answering")
    return json_response({"status": "ready"})
