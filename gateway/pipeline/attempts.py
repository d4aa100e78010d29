"""The attempt loop: walk a model's deployments until one produces its first output token (stream) or a
good body (non-stream). Everything before that token is invisible to the client (docs/extensions.md, "Streams";
docs/extensions.md, "Failure semantics"): failures go to `core.policy.retry.decide`, which answers retry-same,
next-deployment, pass-through or give-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog

from gateway.config.extras import credentials_fix
from gateway.config.types import Deployment
from gateway.core.events import Failure, FailureKind
from gateway.core.policy.affinity import affinity_result
from gateway.core.policy.breaker import counts_against_deployment
from gateway.core.policy.learned import Fact
from gateway.core.policy.retry import Action, AttemptState, decide, final_error
from gateway.core.policy.routing import Signals, hedge_end, route, route_session
from gateway.core.policy.tiers import DEFAULT_OUTPUT_TOKENS
from gateway.core.usage_estimate import tokens_of
from gateway.errors import (
    GatewayError,
    UpstreamClientError,
    UpstreamFailed,
    UpstreamQuota,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from gateway.observe.context import RequestContext
from gateway.pipeline.learned import confirm
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.unanswered import EMPTY_ANSWER, HEDGE_LOST
from gateway.upstream import UpstreamError

T = TypeVar("T")
log = structlog.get_logger("gateway")

ATTEMPT_OUTCOME = {
    FailureKind.CONNECT: "connect_error", FailureKind.HTTP_429: "http_429", FailureKind.HTTP_5XX: "http_5xx",
    FailureKind.HTTP_4XX: "http_4xx", FailureKind.UPSTREAM_AUTH: "http_4xx",
    FailureKind.CONTEXT_LENGTH: "http_4xx", FailureKind.QUOTA: "quota", FailureKind.INBAND: "inband_error",
    FailureKind.EARLY_EOF: "inband_error", FailureKind.MALFORMED: "inband_error",
    FailureKind.FIRST_TOKEN_TIMEOUT: "first_token_timeout", FailureKind.IDLE_TIMEOUT: "idle_timeout",
    FailureKind.TOTAL_TIMEOUT: "idle_timeout", FailureKind.STREAM_REJECTED: "http_4xx",
    FailureKind.STREAM_OPTIONS_REJECTED: "http_4xx", FailureKind.CACHE_KEY_REJECTED: "http_4xx",
    FailureKind.EMPTY: "inband_error",  # a 200 with no output at all: an in-band failure (docs/extensions.md)
    FailureKind.NOT_FOUND: "http_4xx",
}


@dataclass(frozen=True, slots=True)
class Won:
    """The attempt that succeeded, with its result."""

    deployment: Deployment
    attempts: int


AttemptFn = Callable[[Deployment], Awaitable[T]]
Discard = Callable[[T, str], Awaitable[None]]  # (a result dropped, why: `pipeline.unanswered`'s reasons)


async def run_attempts(rt: Runtime, ctx: RequestContext, attempt: AttemptFn[T],
                       discard: Discard[T] | None = None,
                       empty: Callable[[T], bool] | None = None) -> tuple[Won, T]:
    """Try deployments per the routing plan and retry policy. Raises a GatewayError when it gives up.

    With `discard` (how to drop an unwanted result, and why: it charges what the upstream billed) and the
    model's `hedge_after_ms`, the first attempt is hedged: if it has no result by then, the next
    deployment starts too and the first to succeed wins (the loser is cancelled with `HEDGE_LOST`).
    With `empty` (a result that ended cleanly with no output at all), such a result is dropped for the
    next deployment while there is one and attempts are left; the last one is the client's answer.
    """
    model = ctx.model
    failures: list[Failure] = []
    where: list[str] = []  # the deployment of each failure, for the client's error message
    # Breakers are asked lazily, just before a deployment is tried: asking admits a half-open probe.
    session = ctx.session if model.affinity == "session" else None  # docs/agents.md, "Session affinity": the session's
    # ranking, and its home (not always the plan's first: a `latency` probe goes ahead of it)
    if session is None:
        order, home = route(model.deployments, model.table, model.routing, _signals(rt, ctx)), -1
    else:
        order, home = route_session(model.deployments, model.table, model.routing, _signals(rt, ctx), session)
    pos, total, on_this = _next_allowed(rt, order, model.deployments, 0), 0, 0
    if pos < len(order):
        ctx.rec.routed(model.name, model.deployments[order[pos]], model.routing)
    while pos < len(order):
        d = model.deployments[order[pos]]
        total += 1
        on_this += 1
        ctx.attempts = total
        try:
            if total == 1 and discard is not None and model.hedge_after_ms > 0 and pos + 1 < len(order) \
                    and pos + 1 < (end := hedge_end(model.deployments, order, pos)):  # a hedge stays in the tier
                hedge = _Hedge(rt, ctx, attempt, discard, order, pos, end)
                d, result = await hedge.run(d, model.hedge_after_ms / 1000.0)
                total, pos, on_this = ctx.attempts, hedge.pos, hedge.on_this
            else:
                result = await run_one(rt, ctx, d, attempt)
        except _HedgeFailed as hf:
            failures.extend(f for _, f in hf.earlier)
            where.extend(d.label for d, _ in hf.earlier)
            total, pos, on_this, d, failure = ctx.attempts, hf.pos, 1, hf.deployment, hf.failure
        except UpstreamError as exc:
            failure = exc.failure
        else:
            nxt = -1
            if empty is not None and total < model.retry.max_attempts and empty(result):
                nxt = _next_allowed(rt, order, model.deployments, pos + 1)
            if nxt < 0 or nxt >= len(order):
                ctx.rec.attempt_ended(model.name, d, "ok")  # counted once it is kept: a dropped one is not ok
                _affinity_settled(rt, ctx, session, home, d)
                return Won(d, total), result
            if discard is not None:
                await discard(result, EMPTY_ANSWER)
            after_failure(rt, ctx, d, Failure(FailureKind.EMPTY, f"{d.label}: empty answer"))
            pos, on_this = nxt, 0  # another deployment may answer where this one said nothing
            continue
        failures.append(failure)
        where.append(d.label)
        after_failure(rt, ctx, d, failure)
        state = AttemptState(total, on_this, pos + 1 < len(order), False)
        decision = decide(failure, state, model.retry, rt.rand.random)
        if decision.action is Action.PASS_THROUGH:
            raise _after_retries(UpstreamClientError.from_failure(failure), failure.retry_after_s, failure)
        if decision.action is Action.GIVE_UP:
            break
        if decision.action is Action.RETRY_SAME and not rt.allowed(d):
            # the breaker is asked before every attempt, a retry too: this failure may have opened it, and
            # a half-open probe that failed is one attempt, not `per_deployment` of them
            pos, on_this = _next_allowed(rt, order, model.deployments, pos + 1), 0
            continue
        if decision.delay_s > 0:
            await asyncio.sleep(decision.delay_s)
        if decision.action is Action.NEXT:
            pos, on_this = _next_allowed(rt, order, model.deployments, pos + 1), 0
    raise give_up_error(model.name, failures, where)


def _signals(rt: Runtime, ctx: RequestContext) -> Signals:
    """What this request's routing reads (docs/routing.md): the learned TTFTs only where the policy uses
    them, the token estimate only under `cost` (its prompt from the body's size, ~4 bytes a token)."""
    routing = ctx.model.routing
    if routing == "ordered" or routing == "balanced" or routing == "weighted":
        return Signals(rt.inflight, rt.rand.random)
    if routing == "latency":  # a probe only on a stream: a whole body is no TTFT, it would learn nothing
        return Signals(rt.inflight, rt.rand.random, rt.latency, ctx.api, rt.mono(), probes=ctx.stream)
    body = ctx.body
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
    output = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else DEFAULT_OUTPUT_TOKENS
    return Signals(rt.inflight, rt.rand.random, rt.latency, ctx.api, rt.mono(), tokens_of(ctx.body_bytes), output)


class _HedgeFailed(Exception):
    def __init__(self, deployment: Deployment, failure: Failure, earlier: list[tuple[Deployment, Failure]], pos: int):
        super().__init__(failure.message)
        self.deployment, self.failure, self.earlier, self.pos = deployment, failure, earlier, pos


class _Hedge(Generic[T]):
    """Two attempts racing (docs/routing.md): the primary, and after `delay` the next deployment of its tier
    (`order` before `end`): a later tier serves only when the primary's cannot, not while it is slow."""

    def __init__(self, rt: Runtime, ctx: RequestContext, attempt: AttemptFn[T], discard: Discard[T],
                 order: list[int], pos: int, end: int):
        self.rt, self.ctx, self.attempt, self.discard = rt, ctx, attempt, discard
        self.order, self.pos, self.end, self.on_this = order, pos, end, 1

    async def run(self, primary: Deployment, delay: float) -> tuple[Deployment, T]:
        first = asyncio.ensure_future(run_one(self.rt, self.ctx, primary, self.attempt))
        try:
            done, _ = await asyncio.wait({first}, timeout=delay)
        except asyncio.CancelledError:  # the client went before the hedge's delay: the attempt goes with it
            first.cancel()
            with contextlib.suppress(BaseException):
                await first
            raise
        if done:
            return primary, first.result()
        model = self.ctx.model
        hedge_pos = _next_allowed(self.rt, self.order, model.deployments, self.pos + 1, self.end)
        if hedge_pos >= self.end:
            return primary, await first
        second_d = model.deployments[self.order[hedge_pos]]
        self.ctx.attempts = 2
        second = asyncio.ensure_future(run_one(self.rt, self.ctx, second_d, self.attempt))
        racers: dict[asyncio.Future[T], Deployment] = {first: primary, second: second_d}
        won = False
        try:
            result = await self._race(racers, first, hedge_pos)
            won = True
            return result
        finally:
            for task in racers:
                if not task.done():  # the loser, or both when the request itself is cancelled
                    task.cancel(HEDGE_LOST if won else None)  # its attempt charges what it billed
            for task in racers:
                with contextlib.suppress(BaseException):
                    await task

    async def _race(self, racers: dict[asyncio.Future[T], Deployment], first: asyncio.Future[T],
                    hedge_pos: int) -> tuple[Deployment, T]:
        pending, failed = set(racers), []
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            winner = None
            for task in done:
                exc = task.exception()
                if exc is None:
                    winner = task if winner is None else winner  # both at once: the other is discarded
                elif not isinstance(exc, UpstreamError):
                    raise exc
                else:
                    failed.append((racers[task], exc.failure))
            if winner is not None:
                for d, f in failed:  # the other failed first (or with it): counted, logged, its breaker told
                    after_failure(self.rt, self.ctx, d, f)
                await self._settle(racers, winner, first)
                self.pos = hedge_pos if winner is not first else self.pos
                return racers[winner], winner.result()
        for d, f in failed[:-1]:
            after_failure(self.rt, self.ctx, d, f)
        last_d, last_f = failed[-1]
        raise _HedgeFailed(last_d, last_f, failed[:-1], hedge_pos)

    async def _settle(self, racers: dict[asyncio.Future[T], Deployment], winner: asyncio.Future[T],
                      first: asyncio.Future[T]) -> None:
        rec, model = self.ctx.rec, self.ctx.model.name
        rec.hedge_won(model, "primary" if winner is first else "hedge")
        for task, d in racers.items():
            if task is winner:
                continue
            if not task.done():
                rec.attempt_ended(model, d, "hedge_cancelled")
            elif task.exception() is None:  # both won at once: the loser charged, its connection released
                rec.attempt_ended(model, d, "hedge_cancelled")  # it lost all the same (counted once)
                await self.discard(task.result(), HEDGE_LOST)  # (two racers: no other one left to finish)


def _affinity_settled(rt: Runtime, ctx: RequestContext, session: str | None, home: int,
                      served: Deployment) -> None:
    """A session's request was served: at home (`home` indexes the model's deployments), elsewhere (down
    its ranking, or a `latency` probe's deployment), or its first (docs/agents.md, "Session affinity")."""
    if session is not None:
        result = affinity_result(ctx.model.deployments[home].label, served.label, rt.sessions.visit(session))
        ctx.affinity = result.value
        ctx.rec.affinity(ctx.model.name, result.value)


def _next_allowed(rt: Runtime, order: list[int], deployments: tuple[Deployment, ...], start: int,
                  end: int | None = None) -> int:
    """The first position from `start` (before `end`) whose breaker allows it; `end` (or past the plan)
    if none. A breaker is not asked about a deployment past `end`: asking uses up a half-open probe."""
    stop = len(order) if end is None else end
    pos = start
    while pos < stop and not rt.allowed(deployments[order[pos]]):
        pos += 1
    return pos


async def run_one(rt: Runtime, ctx: RequestContext, d: Deployment, attempt: AttemptFn[T]) -> T:
    """One attempt. Every failure before the commit enters the loop here, hedged or not, whatever the
    API, stream or body: the one place its upstream-derived text (an error body's message, code, type,
    param) is scrubbed of our credentials and of what the model's redaction profile masks (docs/extensions.md,
    "Costs a client or an upstream can impose"), before anything logs it, passes it through to the client or
    puts it into a 502's summary. (After the commit, the one place is the failure event a stream core kept:
    `core.stream.StreamCore.upstream_end`.) Its `ok` is counted where its result is kept (an empty answer
    dropped counts `inband_error`, a hedge's loser `hedge_cancelled`), one cut on its way by its request's
    cancellation (the client gone) here, `client_cancelled`: once per attempt."""
    label = d.label
    rt.inflight[label] = rt.inflight.get(label, 0) + 1
    try:
        result = await ctx.rec.attempt(d, attempt)
    except UpstreamError as exc:
        clean = rt.safety.scrubber_for(ctx.model.name).failure(exc.failure)
        if clean is exc.failure:
            raise
        raise UpstreamError(clean) from None
    except asyncio.CancelledError as exc:
        if exc.args != (HEDGE_LOST,):  # a hedge's loser is counted by the race that it lost (`_settle`)
            ctx.rec.attempt_ended(ctx.model.name, d, "client_cancelled")
        raise
    finally:
        rt.inflight[label] -= 1
    rt.breaker(d).record_success(time.monotonic())
    if ctx.fallbacks:  # a request trying a fallback: one without prompt_cache_key is confirmed here
        confirm(rt.learned, ctx, d, Fact.NO_PROMPT_CACHE_KEY, rt.provider(d).learn_ttl_s)
    return result


def after_failure(rt: Runtime, ctx: RequestContext, d: Deployment, failure: Failure) -> None:
    ctx.rec.attempt_ended(ctx.model.name, d, ATTEMPT_OUTCOME[failure.kind])
    ctx.failed_deployment, ctx.failure_reason = d, failure.kind.value
    if counts_against_deployment(failure.kind):
        rt.breaker(d).record_failure(time.monotonic())
    if failure.kind is FailureKind.STREAM_OPTIONS_REJECTED:
        ctx.fallbacks.add((d.label, Fact.NO_STREAM_OPTIONS))  # learned only if the retry without succeeds
    elif failure.kind is FailureKind.STREAM_REJECTED:
        ctx.fallbacks.add((d.label, Fact.NO_STREAM if ctx.stream else Fact.STREAM_ONLY))
    elif failure.kind is FailureKind.CACHE_KEY_REJECTED:
        ctx.fallbacks.add((d.label, Fact.NO_PROMPT_CACHE_KEY))
    if failure.kind is FailureKind.UPSTREAM_AUTH:  # our credentials: say where they come from
        log.warning("upstream_attempt_failed", deployment=d.label, kind=failure.kind.value, status=failure.status,
                    code=failure.code, fix=credentials_fix(rt.provider(d)))
        return
    log.info("upstream_attempt_failed", deployment=d.label, kind=failure.kind.value, status=failure.status,
             code=failure.code)


def give_up_error(model: str, failures: list[Failure], where: list[str]) -> GatewayError:
    """What the client gets once the gateway has spent its own retries, its class decided by
    `core.policy.retry.final_error`: `x-should-retry: false` on all of it (docs/reference.md, "Routes"), so an SDK's
    retries don't multiply upstream calls."""
    if not failures:
        return _after_retries(UpstreamFailed(f"model {model}: no deployment is available (all are cooling down)"))
    final = final_error(failures)
    last = failures[-1]
    wait = final.retry_after_s
    if final.kind == "client":
        return _after_retries(UpstreamClientError.from_failure(last), wait, last)
    if final.kind == "quota":
        return _after_retries(UpstreamQuota.from_failure(last), wait, last)
    summary = "; ".join(map(_describe, failures[-3:], where[-3:]))
    if final.kind == "rate_limited":
        err: GatewayError = UpstreamRateLimited(f"model {model}: every attempt was rate-limited upstream ({summary})")
    elif final.kind == "timeout":
        err = UpstreamTimeout(f"model {model}: every attempt timed out ({summary})")
    else:
        err = UpstreamFailed(f"model {model}: every attempt failed ({summary})")
    return _after_retries(err, wait, last)


def _after_retries(err: GatewayError, wait: float | None = None, last: Failure | None = None) -> GatewayError:
    """`wait`: the upstream's, passed on as Retry-After. `last`: the failure the log line's reason names."""
    err.headers["x-should-retry"] = "false"
    if wait is not None and wait == wait and wait > 0:  # `wait == wait`: not NaN
        err.headers["Retry-After"] = str(max(1, math.ceil(min(wait, 86_400.0))))
    if last is not None:
        err.reason = last.kind.value
    return err


def _describe(f: Failure, label: str) -> str:
    """Client-safe, naming the deployment (docs/reference.md, "Errors"): the message only for messages we
    wrote ourselves (they name it already, never a URL); else the failure kind, status and code."""
    if f.kind in (FailureKind.CONNECT, FailureKind.EARLY_EOF, FailureKind.IDLE_TIMEOUT,
                  FailureKind.TOTAL_TIMEOUT, FailureKind.FIRST_TOKEN_TIMEOUT, FailureKind.MALFORMED):
        return f.message
    status = f" HTTP {f.status}" if f.status else ""
    code = f" {f.code}" if f.code else ""
    return f"{label}: {f.kind.value}{status}{code}"
