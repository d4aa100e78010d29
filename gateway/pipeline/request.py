"""The pipeline's request: the body parsed once, the key authenticated, the model resolved, the context."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from gateway.config.types import Deployment
from gateway.core.api import ClientApi
from gateway.core.body_scan import Scan, walked
from gateway.core.json_body import (
    CONTAINERS_MESSAGE,
    DEPTH_MESSAGE,
    MAX_CONTAINERS,
    MAX_DEPTH,
    BodyError,
    DepthCheck,
    copy_containers,
    parse_shallow,
)
from gateway.core.json_split import SplitParse
from gateway.core.policy.affinity import session_digest
from gateway.errors import InvalidRequest, ModelNotFound
from gateway.observe.context import REQUESTED_MODEL_CHARS, Admission, RequestContext
from gateway.pipeline.attempts import Won
from gateway.pipeline.auth import KeyRing, SigningKeyUnknown
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.slicer import TextSlot
from gateway.providers.base import MARKER, MARKER_NEEDLES, Translator, Unserved, unserved

INLINE_DEPTH_BYTES = 64 * 1024  # a smaller body's depth is walked at once: ~1 ms at worst
SPLIT_BYTES = 1024 * 1024  # a bigger body is parsed in steps where it can be (a whole parse is 1-2 ms a MiB)
DEPTH_STEP_VALUES = 2000  # values visited per step of a bigger body's walk: ~0.5 ms
# How deep a lent body's prompt texts lie: WebSocket mode lends Responses bodies, whose texts are in the body,
# `input`, its items, their `content` and `output` lists and parts (apis/responses.py:input_slots;
# tests/unit/test_json_body.py)
LENT_TEXT_DEPTH = 5


async def read_json(rt: Runtime, request: GatewayRequest) -> tuple[dict[str, Any], bool]:
    """The body as a JSON object, and whether an object of it has the cache marker key. Its size
    was bounded while it was read (`server.max_body_bytes`), its depth is bounded here (`core.json_body`):
    the walk of a big body's containers (~20 ms a MiB of small objects) a slice at a time, between the
    loop's other work (`pipeline.slicer`). A body over SPLIT_BYTES with long strings in it is parsed in
    steps too (`core.json_split`), its marker search with it; any other is parsed whole in a step of its
    own. A body its transport parsed and walked in parts (`request.scan`, WebSocket mode) is held to the
    same bounds by what those walks found, its bytes not scanned again."""
    raw = request.body
    try:
        if request.scan is not None and request.parsed is not None:
            return walked_body(request.parsed, request.scan)
        if len(raw) > SPLIT_BYTES and request.parsed is None:
            split = SplitParse(raw, MARKER_NEEDLES)
            await rt.slicer.run(split)
            if split.body is not None:
                return split.body, split.found
            body = parse_shallow(raw, split.brackets)
            if split.brackets >= MAX_DEPTH and (await _walked(rt, body, len(raw)))[0]:
                raise InvalidRequest(DEPTH_MESSAGE)
            return body, split.found
        # the bracket count only where the container bound needs it, before parsing (`parse_shallow`)
        body = parse_shallow(raw, parsed=request.parsed)
    except BodyError as exc:
        raise InvalidRequest(str(exc)) from None
    # one walk of the parsed body bounds its depth and finds its cache markers, where scanning its bytes
    # for brackets and for the marker key cost more than the walk (bench/README.md, "agent-sized bodies")
    deep, marked = await _walked(rt, body, len(raw))
    if deep:
        raise InvalidRequest(DEPTH_MESSAGE)
    return body, marked


def walked_body(body: dict[str, Any], known: Scan) -> tuple[dict[str, Any], bool]:
    """A body its transport parsed and walked in parts (`core.body_scan`), held to the same bounds (also
    WebSocket mode's warm-up, whose conversation is kept as a response's is)."""
    if known.containers > MAX_CONTAINERS:
        raise InvalidRequest(CONTAINERS_MESSAGE)
    if known.too_deep:
        raise InvalidRequest(DEPTH_MESSAGE)
    return body, known.marked


async def _walked(rt: Runtime, body: dict[str, Any], size: int) -> tuple[bool, bool]:
    """Whether a parsed body nests too deep, and whether an object of it has the cache marker key: walked
    at once for a small body, a slice at a time for a bigger one (~20 ms a MiB of small objects)."""
    if size <= INLINE_DEPTH_BYTES:
        scan = walked(body, 0, MARKER)
        return scan.too_deep, scan.marked
    check = DepthCheck(body, MAX_DEPTH, DEPTH_STEP_VALUES, MARKER)
    await rt.slicer.run(check)
    return check.exceeded, check.marked


def is_anthropic(headers: Mapping[str, str]) -> bool:
    """A request from an Anthropic client (SDK, Claude Code): it names the Messages API's version. On
    `/v1/models` it gets Anthropic's shapes and may carry the key in `x-api-key`."""
    return "anthropic-version" in headers


async def resolve(request: GatewayRequest, api: ClientApi) -> tuple[Runtime, RequestContext]:
    """Authenticate, parse, resolve and authorise. What is known on the way (the key, the name asked
    for) is kept on `request.admission` at once, so a refusal's log line still says who asked what."""
    rt = request.app.runtime
    try:
        key = rt.keyring.authenticate(request.headers, x_api_key=api.x_api_key)
    except SigningKeyUnknown:  # an IdP token signed by a key not yet fetched: one refetch may bring it
        key = await rt.keyring.after_refetch(request.headers, x_api_key=api.x_api_key)
    request.admission = Admission(key)
    body, cache_marked = await read_json(rt, request)
    session = session_digest(request.headers, body)
    name = body.get("model")
    if not isinstance(name, str) or not name:
        request.admission = Admission(key, None, session)
        raise InvalidRequest("you must provide a model parameter", param="model")
    request.admission = Admission(key, name[:REQUESTED_MODEL_CHARS], session)
    model = rt.model(name, key)
    if model is None:  # perhaps a name another process learned from an answer (the state backend asked)
        model = await rt.shared_model(name, key, request.app.state)
    if model is None:
        raise ModelNotFound.named(name)
    KeyRing.authorize(key, model.name, name)
    if body is request.parsed and rt.safety.models[model.name].redact_inputs:
        # input redaction masks the prompt's texts in place (redact_input_slots, below): in objects of this
        # request's own, not in the ones its transport lent it (WebSocket mode keeps them for the next turn).
        # A copy of the containers they lie in, the texts shared: parsing the bytes again for one held the
        # loop ~20-50 ms for a 10 MiB text
        body = copy_containers(body, LENT_TEXT_DEPTH)
    stream, forward_usage = _stream_flags(body)
    ctx = RequestContext(request_id=request.request_id, api=api.name, schema=api.schema, model=model, body=body,
                         stream=stream, rec=request.recorder, key=key, forward_usage=forward_usage,
                         t_start=request.t0,
                         client_headers={**request.headers, "x-request-id": request.request_id},
                         response_headers=request.extra_headers,
                         session=session, body_bytes=request.body_size,
                         cache_marked=cache_marked)
    request.ctx = ctx
    return rt, ctx


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the answer is streamed, and whether the client asked for the usage chunk."""
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("stream must be a boolean", param="stream")
    opts = body.get("stream_options")
    return bool(stream), isinstance(opts, dict) and opts.get("include_usage") is True


def answer_headers(ctx: RequestContext, won: Won) -> dict[str, str]:
    """A non-stream answer's headers: which deployment answered, after how many attempts."""
    return {"x-request-id": ctx.request_id, "x-gateway-deployment": won.deployment.label,
            "x-gateway-attempts": str(won.attempts)}


def prompt_slots(rt: Runtime, ctx: RequestContext,
                 slots_of: Callable[[dict[str, Any], bool], list[TextSlot]]) -> tuple[list[TextSlot], str]:
    """The prompt's text slots and the text its input guardrails judge (before masking; "" without any).
    The texts are gathered only for what reads them (a walk of the whole conversation on every request
    otherwise: ~40 us for 30 turns); `slots_of` checks the body's shape either way."""
    safety = rt.safety.models[ctx.model.name]
    slots = slots_of(ctx.body, safety.redact_inputs or bool(safety.input_guards))
    return slots, "\n".join(obj[key] for obj, key in slots) if safety.input_guards else ""


async def redact_input_slots(rt: Runtime, ctx: RequestContext, slots: list[TextSlot]) -> None:
    """`redaction.inputs: true`: mask secrets in the prompt's texts before it leaves for the provider,
    a slice at a time between the loop's other work (`pipeline.slicer`)."""
    safety = rt.safety.models[ctx.model.name]
    if safety.redact_inputs and safety.redactor is not None and slots:
        await rt.slicer.redact(safety.redactor, slots)


def prompt_sent(rt: Runtime, ctx: RequestContext, slots: list[TextSlot]) -> str | None:
    """The prompt's text as it leaves for the provider, after its input redaction, when an input webhook
    is sent it and `redaction.inputs` masked it; else None (the text `prompt_slots` gave). A webhook is
    never sent a secret the profile masks (docs/extensions.md, "Guardrails judge what the client reads")."""
    safety = rt.safety.models[ctx.model.name]
    if not (safety.redact_inputs and safety.redactor is not None and slots):
        return None
    if all(g.text is not None for g in safety.input_guards):  # no webhook: terms and regex stay in process
        return None
    return "\n".join(obj[key] for obj, key in slots)


def keep_serving(ctx: RequestContext, cell: Callable[[Deployment], Translator | None], api_name: str,
                 body: Mapping[str, Any] | None = None) -> None:
    """Only the model's deployments whose provider serves this API (`cell(d)` is its translator) are
    candidates, and, given the request's `body`, only those whose cell can serve it: a Responses bridge
    cannot continue a `previous_response_id` (docs/responses-bridge.md), so such a request goes only to OpenAI
    Responses upstreams, and is a 400 that says why when the model has none. One pass, one lookup each."""
    serving: list[Deployment] = []
    why: Unserved | None = None
    for d in ctx.model.deployments:
        tr = cell(d)
        if tr is None:
            continue
        reason = unserved(tr, body) if body is not None else None
        if reason is None:
            serving.append(d)
        elif why is None:
            why = reason
    if not serving:
        if why is not None:
            raise InvalidRequest(why.message, param=why.param)
        raise InvalidRequest(f"model {ctx.model.name} has no deployment that serves the {api_name} API",
                             param="model")
    if len(serving) != len(ctx.model.deployments):
        ctx.model = dataclasses.replace(ctx.model, deployments=tuple(serving))
