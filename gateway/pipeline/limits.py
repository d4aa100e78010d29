"""Per-key admission (rpm, tpm, budget) before any upstream call, and settlement after the answer.

Tokens are reserved up front from the request (its prompt's size and `max_tokens`, or a bounded estimate)
so a burst cannot overshoot much, then replaced by the provider's real usage (docs/reference.md, "Config
keys" `auth`); a budget holds each admitted request's estimated cost the same way until its real cost is
counted (docs/keys-teams-spend.md, Budgets).
"""

from __future__ import annotations

import math

import structlog

from gateway.config.types import ApiKey, TeamLimits
from gateway.core.usage_estimate import tokens_of
from gateway.errors import BudgetExceeded, RateLimited
from gateway.observe.context import RequestContext
from gateway.pipeline.runtime import Runtime
from gateway.state.base import LimitDecision, Period, SpendHold, StateBackend, seconds_until_reset
from gateway.state.window import WindowCounts, headroom

log = structlog.get_logger("gateway")
MAX_ESTIMATE = 32_768
DEFAULT_ANSWER = 512  # the answer's tokens estimated for a request that sets no cap


def estimate(ctx: RequestContext) -> tuple[int, int]:
    """The prompt's tokens and the answer's, as admission reserves them: the whole body at ~4 bytes a
    token (system prompt, tools and instructions are input as much as the messages are), and the answer's
    cap (or a modest default) for each of its `n` choices; each at most `MAX_ESTIMATE`."""
    body = ctx.body
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
    answer = cap if isinstance(cap, int) and cap > 0 else DEFAULT_ANSWER
    n = body.get("n")
    choices = n if isinstance(n, int) and n > 1 else 1
    return min(MAX_ESTIMATE, tokens_of(ctx.body_bytes)), min(MAX_ESTIMATE, answer * choices)


def estimate_tokens(ctx: RequestContext) -> int:
    return min(MAX_ESTIMATE, sum(estimate(ctx)))


def estimate_cost(ctx: RequestContext) -> float:
    """What the request may cost at its model's dearest deployment: the hold a budget keeps for it while it
    runs (docs/keys-teams-spend.md, Budgets)."""
    prompt, answer = estimate(ctx)
    return max(((prompt * d.price.input + answer * d.price.output) / 1_000_000 for d in ctx.model.deployments),
               default=0.0)


async def admit(rt: Runtime, state: StateBackend, ctx: RequestContext, *, tokens: bool = True) -> None:
    """Refuse a key over its or its team's budget, rpm or tpm; else count the request, reserve its tokens
    and hold its estimated cost against the budgets. `tokens=False`: a request that spends no tokens
    (count_tokens) counts against rpm only, the key's and the team's (docs/keys-teams-spend.md, "A limit of 0").
    Budgets first, then the key's own rates, then its team's: what one check counted is taken back (or
    given back at settlement) when a later one refuses, so a key refused by its own limit spends nothing
    of its team's, and its teammates are not refused for it."""
    key = ctx.key
    if key is None:
        return
    now = rt.clock()
    team = key.team
    budgeted = key.budget_usd is not None or (team is not None and team.budget_usd is not None)
    usd = estimate_cost(ctx) if tokens and budgeted else 0.0  # a key without a budget holds nothing
    if team is not None and team.budget_usd is not None:
        ctx.team_hold = await hold_budget(state, team, usd, now)
    if key.budget_usd is not None:
        ctx.key_hold = await hold_budget(state, key, usd, now)
    tpm = key.tpm if tokens else None
    if key.rpm is not None or tpm is not None:
        reserve = estimate_tokens(ctx) if tpm is not None else 0
        decision, reservation = await state.check_request(key.counter, key.rpm, tpm, reserve, now)
        ctx.response_headers.update(ratelimit_headers(key.rpm, tpm, decision, now))  # on the answer, 429 or not
        if not decision.allowed:
            limit = decision.limit or "rpm"
            ctx.rec.rate_limited(key.name, limit)
            raise rate_refusal(f"key {key.name}", limit, decision)
        ctx.reservation = reservation
    if team is not None:
        await admit_team(state, ctx, team, tokens, now)


async def admit_team(state: StateBackend, ctx: RequestContext, team: TeamLimits, tokens: bool, now: float) -> None:
    """The team's rpm and tpm, counted for all its keys together (docs/keys-teams-spend.md); refused, the
    key's own count is taken back."""
    tpm = team.tpm if tokens else None
    if team.rpm is None and tpm is None:
        return
    reserve = estimate_tokens(ctx) if tpm is not None else 0
    decision, reservation = await state.check_request(team.counter, team.rpm, tpm, reserve, now)
    if not decision.allowed:
        if ctx.reservation is not None:
            await state.release(ctx.reservation)
            ctx.reservation = None
        limit = decision.limit or "rpm"
        ctx.rec.rate_limited(ctx.key_name, limit)  # the key refused, by its team's limit: counted too
        raise rate_refusal(f"team {team.name}", limit, decision)
    ctx.team_reservation = reservation


def rate_refusal(whose: str, limit: str, decision: LimitDecision) -> RateLimited:
    """429 `rate_limit_exceeded`; `Retry-After` in whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3)."""
    retry = max(1, math.ceil(decision.retry_after_s))
    return RateLimited(f"{whose} is over its {limit} limit", headers={"Retry-After": str(retry)})


async def hold_budget(state: StateBackend, owner: ApiKey | TeamLimits, usd: float, now: float) -> SpendHold:
    """Refuse when the key's or team's spend for its period, with what its requests in flight hold, has
    reached its budget; else hold `usd` for this request until it is charged (`settle`)."""
    assert owner.budget_usd is not None
    hold, spent = await state.hold_spend(owner.counter, owner.budget_period, owner.budget_usd, usd, now)
    if hold is not None:
        return hold
    whose = f"team {owner.name}" if isinstance(owner, TeamLimits) else f"key {owner.name}"
    if spent >= owner.budget_usd:
        raise budget_refusal(whose, owner.budget_period, now)
    # not used up: held by its requests in flight, which give their holds back as they end
    refused = RateLimited(f"the budget of {whose} for this {owner.budget_period} is held by its requests in "
                          "flight", headers={"Retry-After": "1"})
    refused.reason = "budget_held"
    raise refused


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
    """Whether `settle` has anything to charge or give back (most requests of an unlimited key have not).
    Every key's spend is kept, budget or not, so `GET /v1/gateway/spend` can tell any team what it spent."""
    key = ctx.key
    return key is not None and (ctx.reservation is not None or ctx.team_reservation is not None
                                or ctx.key_hold is not None or ctx.team_hold is not None or ctx.cost_usd > 0)


async def settle(state: StateBackend, ctx: RequestContext, now: float) -> None:
    """Charge the real usage and spend (and give back the budgets' holds); never raises (the answer has
    already been given). `now`: when the answer ended, on the clock admission read (`Runtime.clock`)."""
    key = ctx.key
    if key is None:
        return
    try:
        await charge(state, key.counter, key.budget_period, ctx.key_hold, ctx.cost_usd, now)
        if key.team is not None:
            await charge(state, key.team.counter, key.team.budget_period, ctx.team_hold, ctx.cost_usd, now)
        actual = ctx.usage.input + ctx.usage.output if ctx.usage is not None else 0
        if ctx.reservation is not None:
            await state.settle_tokens(ctx.reservation, actual, now)
        if ctx.team_reservation is not None:
            await state.settle_tokens(ctx.team_reservation, actual, now)
    except Exception as exc:  # state failures degrade inside the backend; this is a last resort
        log.warning("settle_failed", key=key.name, error=type(exc).__name__)


async def charge(state: StateBackend, counter: str, period: Period, hold: SpendHold | None, usd: float,
                 now: float) -> None:
    if hold is not None:
        await state.charge_spend(hold, usd, now)  # its hold given back however the charge ends
    elif usd > 0:
        await state.add_spend(counter, period, usd, now)
