"""Guardrail verdicts that need the whole text, and webhooks (the I/O part of docs/reference.md, "`guardrails`").

Terms and regex guardrails judge with the pure `TextGuard`; a webhook POSTs `{"stage", "model", "text"}`
and reads `{"allow": bool, "reason": str}`. A webhook that fails, times out or answers nonsense blocks
(fail closed). Every verdict is counted; the verdict, never the text, goes to the log line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.core.events import DeltaKind
from gateway.core.stream import Answer
from gateway.errors import GatewayError, GuardrailBlocked
from gateway.observe.context import RequestContext
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import Guardrail, TextMap
from gateway.upstream import UpstreamError

if TYPE_CHECKING:
    from gateway.core.policy.guard import Verdict


async def verdict(rt: Runtime, ctx: RequestContext, g: Guardrail, stage: str, text: str,
                  sent: str | None = None) -> Verdict:
    """`sent`: the text as it leaves the gateway when that differs from `text` (a prompt masked by
    `redaction.inputs`): what a webhook is sent, since the webhook is somewhere it leaves for."""
    if g.text is not None:
        v = await rt.slicer.check(g.text, text)  # a slice at a time: a long text must not stall the loop
    else:
        v = await _webhook(rt, ctx, g, stage, text if sent is None else sent)
    record(rt, ctx, g.name, stage, v.allowed)
    return v


def record(rt: Runtime, ctx: RequestContext, name: str, stage: str, allowed: bool) -> None:
    outcome = "pass" if allowed else "block"
    ctx.rec.verdict(name, stage, outcome)
    ctx.verdicts[f"{name}:{stage}"] = outcome


async def _webhook(rt: Runtime, ctx: RequestContext, g: Guardrail, stage: str, text: str) -> Verdict:
    assert g.config.url is not None
    payload = {"stage": stage, "model": ctx.model.name, "text": text}
    try:
        answer = await rt.upstream.post_json(g.config.url, payload, g.config.timeout_s, f"guardrail {g.name}")
    except UpstreamError:
        return _verdict(False, g.name, "the guardrail service is unavailable")
    if not isinstance(answer, dict) or not isinstance(answer.get("allow"), bool):
        return _verdict(False, g.name, "the guardrail service gave no verdict")
    reason = answer.get("reason")
    return _verdict(answer["allow"], g.name, reason if isinstance(reason, str) else "")


def _verdict(allowed: bool, name: str, reason: str) -> Verdict:
    from gateway.core.policy.guard import Verdict

    return Verdict(allowed, name, reason)


async def check_input(rt: Runtime, ctx: RequestContext, text: str, sent: str | None = None) -> None:
    """Input guardrails run before any upstream call; a refusal is 400 guardrail_blocked. `text`: the
    prompt as the client sent it, which terms and regex judge; `sent`: as it leaves for the provider,
    masked (`redaction.inputs`), which a webhook is sent (`pipeline.request.prompt_sent`)."""
    for g in rt.safety.models[ctx.model.name].input_guards:
        v = await verdict(rt, ctx, g, "input", text, sent)
        if not v.allowed:
            raise GuardrailBlocked(_message(v), param=g.name)


_KINDS = (DeltaKind.CONTENT, DeltaKind.REFUSAL, DeltaKind.REASONING)


def output_text(assembler: Answer) -> str:
    parts = [assembler.text(k) for k in _KINDS]
    return "\n".join(p for p in parts if p)


async def masked_output_text(rt: Runtime, ctx: RequestContext, assembler: Answer) -> str:
    """`output_text` of a streamed answer, whose assembler read the upstream's text, as the client read it:
    masked one-shot with the model's profile, as the text windows masked it (the matches were counted
    there). Guardrails judge what the client reads, and a webhook is never sent a secret the gateway
    masks (core/policy/guard.py, "Mask markers")."""
    texts = [assembler.text(k) for k in _KINDS]

    def walk(fn: TextMap) -> None:
        for i, kind in enumerate(_KINDS):
            texts[i] = fn(kind, texts[i])

    await rt.safety.models[ctx.model.name].mask_texts(rt.slicer, walk)  # a slice at a time, as a body's
    return "\n".join(t for t in texts if t)


async def judge_output(rt: Runtime, ctx: RequestContext, assembler: Answer,
                       guards: Sequence[Guardrail], *, masked: bool = True) -> GatewayError | None:
    """Whole-answer guardrails (hold, audit, and webhooks in stream mode): the first refusal, if any.
    `masked`: the assembler read the client's (masked) text, a body's; else a stream's upstream text."""
    if not guards:
        return None
    text = output_text(assembler) if masked else await masked_output_text(rt, ctx, assembler)
    for g in guards:
        v = await verdict(rt, ctx, g, "output", text)
        if not v.allowed:
            return GuardrailBlocked(_message(v), param=g.name)
    return None


def _message(v: Verdict) -> str:
    return f"refused by guardrail {v.guardrail}" + (f": {v.reason}" if v.reason else "")
