"""Per-key admission (rpm, tpm, budget) before any upstream call, and settlement after the answer.

Tokens are reserved up front from the request (`max_tokens`, or a bounded estimate from the prompt's
size) so a burst cannot overshoot much, then replaced by the provider's real usage (docs/reference.md, "Config keys"
`auth`).
"""

from __future__ import annotations

import math
import time

import structlog

from gateway.config.types import ApiKey, TeamLimits
from gateway.errors import BudgetExceeded, RateLimited
from gateway.observe.context import RequestContext
from gateway.pipeline.runtime import Runtime
from gateway.state.base import LimitDecision, Period, StateBackend, seconds_until_reset
from gateway.state.window import WindowCounts, headroom

log = structlog.get_logger("gateway")
MAX_ESTIMATE = 32_768


def estimate_tokens(ctx: RequestContext) -> int:
    """Prompt size at ~4 bytes a token plus the answer's cap (or a modest default)."""
    body = ctx.body
    prompt_chars = len(str(body.get("messages") or body.get("input") or ""))
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
    answer = cap if isinstance(cap, int) and cap > 0 else 512
    return min(MAX_ESTIMATE, prompt_chars // 4 + answer)


async def admit(rt: Runtime, state: StateBackend, ctx: RequestContext, *, tokens: bool = True) -> None:
    """Refuse a key over its budget, rpm or tpm; else count the request and reserve its tokens.
    `tokens=False`: a request that spends no tokens (count_tokens) counts against rpm only."""
    key = ctx.key
    if key is None:
        return
    now = rt.clock()
    if key.team is not None:  # a stored key in a team: the team's limits first, then the key's own
        await admit_team(rt, state, ctx, key.team, now)
    if key.budget_usd is not None:
        await within_budget(state, key, now)
    tpm = key.tpm if tokens else None
    if key.rpm is None and tpm is None:
        return
    reserve = estimate_tokens(ctx) if tpm is not None else 0
    decision, reservation = await state.check_request(key.counter, key.rpm, tpm, reserve, now)
    ctx.response_headers.update(ratelimit_headers(key.rpm, tpm, decision, now))  # on the answer, 429 or not
    if not decision.allowed:
        limit = decision.limit or "rpm"
        ctx.rec.rate_limited(key.name, limit)
        retry = max(1, int(decision.retry_after_s + 0.999))
        raise RateLimited(f"key {key.name} is over its {limit} limit", headers={"Retry-After": str(retry)})
    ctx.reservation = reservation


async def admit_team(rt: Runtime, state: StateBackend, ctx: RequestContext, team: TeamLimits, now: float) -> None:
    """The team's budget, rpm and tpm, counted for all its keys together (docs/keys-teams-spend.md)."""
    if team.budget_usd is not None:
        await within_budget(state, team, now)
    if team.rpm is None and team.tpm is None:
        return
    reserve = estimate_tokens(ctx) if team.tpm is not None else 0
    decision, reservation = await state.check_request(team.counter, team.rpm, team.tpm, reserve, now)
    if not decision.allowed:
        limit = decision.limit or "rpm"
        retry = max(1, int(decision.retry_after_s + 0.999))
        raise RateLimited(f"team {team.name} is over its {limit} limit", headers={"Retry-After": str(retry)})
    ctx.team_reservation = reservation


async def within_budget(state: StateBackend, owner: ApiKey | TeamLimits, now: float) -> None:
    """Refuse when the key's or team's spend for its period has reached its budget."""
    if owner.budget_usd is not None and await state.spend(owner.counter, owner.budget_period, now) >= owner.budget_usd:
        whose = f"team {owner.name}" if isinstance(owner, TeamLimits) else f"key {owner.name}"
        raise budget_refusal(whose, owner.budget_period, now)


async def within_budgets(rt: Runtime, state: StateBackend, key: ApiKey | None) -> None:
    """The budgets alone, for what spends nothing and is not counted (a WebSocket warm-up: docs/reference.md,
    WebSocket mode): the key's team's, then the key's own."""
    if key is not None:
        now = rt.clock()
        if key.team is not None:
            await within_budget(state, key.team, now)
        await within_budget(state, key, now)


def budget_refusal(whose: str, period: Period, now: float) -> BudgetExceeded:
    """429 `budget_exceeded`: `Retry-After` is when the period resets and `x-should-retry: false` tells
    the SDKs not to retry sooner (docs/reference.md, Errors): a retry before then is refused again."""
    return BudgetExceeded(f"the budget of {whose} for this {period} is used up",
                          headers={"Retry-After": str(seconds_until_reset(period, now)), "x-should-retry": "false"})


def ratelimit_headers(rpm: int | None, tpm: int | None, decision: LimitDecision, now: float) -> dict[str, str]:
    """OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for each limit checked; tokens
    count what was reserved for this request (settled to the real usage after the answer)."""
    if decision.counts is None:
        return {}
    rc, rp, tc, tp = decision.counts
    out: dict[str, str] = {}
    for unit, limit, current, previous in (("requests", rpm, rc, rp), ("tokens", tpm, tc, tp)):
        if limit is None:
            continue
        remaining, reset = headroom(WindowCounts(current, previous), limit, now)
        out[f"x-ratelimit-limit-{unit}"] = str(limit)
        out[f"x-ratelimit-remaining-{unit}"] = str(remaining)
        out[f"x-ratelimit-reset-{unit}"] = duration(reset)
    return out


def duration(seconds: float) -> str:
    """As OpenAI writes a reset: `20ms`, `1.5s`, `6m0s` (milliseconds rounded up)."""
    ms = math.ceil(seconds * 1000 - 1e-6)
    if ms < 1000:
        return f"{max(ms, 0)}ms"
    minutes, rest = divmod(ms, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def needs_settle(ctx: RequestContext) -> bool:
    """Whether `settle` has anything to charge (most requests of an unlimited key have not). Every key's
    spend is kept, budget or not, so `GET /v1/gateway/spend` can tell any team what it spent."""
    key = ctx.key
    return key is not None and (ctx.reservation is not None or ctx.team_reservation is not None
                                or ctx.cost_usd > 0)


async def settle(state: StateBackend, ctx: RequestContext) -> None:
    """Charge the real usage and spend; never raises (the answer has already been given)."""
    key = ctx.key
    if key is None:
        return
    try:
        actual = ctx.usage.input + ctx.usage.output if ctx.usage is not None else 0
        if ctx.reservation is not None:
            await state.settle_tokens(ctx.reservation, actual)
        if ctx.team_reservation is not None:
            await state.settle_tokens(ctx.team_reservation, actual)
        if ctx.cost_usd > 0:
            await state.add_spend(key.counter, key.budget_period, ctx.cost_usd, time.time())
            if key.team is not None:
                await state.add_spend(key.team.counter, key.team.budget_period, ctx.cost_usd, time.time())
    except Exception as exc:  # state failures degrade inside the backend; this is a last resort
        log.warning("settle_failed", key=key.name, error=type(exc).__name__)
