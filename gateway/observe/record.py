"""The per-request recorder: ONE object per API request, with a method per lifecycle point, that writes
the request's metrics (docs/reference.md, "Metrics"), its spans (through its `RequestTrace`) and its log line
(docs/reference.md, "Logs"). Nothing outside `observe/` touches a metric object; the pipeline calls these methods and
nothing else.

Labelled children are looked up once per request where a stream writes per chunk (`text_delay`), so
the hot path costs one method call per write, as before.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.config.types import Deployment
from gateway.core.events import Usage
from gateway.core.usage_estimate import estimated_part
from gateway.observe import genai
from gateway.observe.logs import write_info
from gateway.observe.metrics import Metrics, usage_cost
from gateway.observe.recorder import NO_TRACE, RequestTrace
from gateway.observe.stats_window import WINDOW

if TYPE_CHECKING:
    from gateway.observe.context import Admission, RequestContext

T = TypeVar("T")
CACHE_PROVIDER = "cache"  # the `provider` label of a cache hit's TTFT
UNRESOLVED = "(unresolved)"
_TOKEN_FIELDS = ("input", "output", "cached_input", "cache_creation_input", "reasoning")


_STREAM_OUTCOME = {"guardrail": "guardrail_blocked", "idle_timeout": "timeout", "total_timeout": "timeout",
                   "first_token_timeout": "timeout", "upstream_timeout": "timeout"}


def stream_outcome(stream_error: str | None) -> str:
    """The `outcome` label of a committed stream from how it ended (None: it ended well)."""
    return "ok" if stream_error is None else _STREAM_OUTCOME.get(stream_error, "upstream_error")


@dataclass(frozen=True, slots=True)
class End:
    """How a request ended: its status, `outcome` label, and why when it did not succeed."""

    status: int
    outcome: str
    reason: str | None


class RequestRecorder:
    __slots__ = ("_answer", "_delay", "_duration", "_tpot", "api", "m", "request_id", "t0", "trace", "transport")

    def __init__(self, m: Metrics, api: str, request_id: str, t0: float, trace: RequestTrace = NO_TRACE,
                 transport: str = "http"):
        self.m, self.api, self.request_id, self.t0, self.trace = m, api, request_id, t0, trace
        self.transport = transport  # "websocket": a WebSocket-mode response (docs/reference.md, Logs)
        self._delay: Any = None
        self._duration = 0.0
        self._tpot: float | None = None  # a stream's time per output token, for the GenAI metric at the end
        # the answer's own usage as its upstream reported it (`answered`), with its deployment: the GenAI
        # token usage and the winning span's, apart from the request's charge (other attempts' included)
        self._answer: tuple[Deployment, Usage | None] | None = None

    # -- admission -----------------------------------------------------------------------------------

    def started(self) -> None:
        """The request is in flight."""
        self.m.child(self.m.inflight, self.api).inc()

    def rate_limited(self, key: str, limit: str) -> None:
        self.m.child(self.m.rate_limited, key, limit).inc()

    def verdict(self, guardrail: str, stage: str, outcome: str) -> None:
        self.m.child(self.m.guardrail_verdicts, guardrail, stage, outcome).inc()

    # -- attempts ------------------------------------------------------------------------------------

    def attempt(self, d: Deployment, run: Callable[[Deployment], Awaitable[T]]) -> Awaitable[T]:
        """One upstream attempt on `d`: `run(d)`, inside its own span when traced."""
        return self.trace.attempt(d, run)

    def attempt_ended(self, model: str, d: Deployment, outcome: str) -> None:
        """An attempt's outcome (`ok`, a failure class, `hedge_cancelled`)."""
        self.m.child(self.m.attempts, model, d.label, outcome).inc()

    def dropped(self, d: Deployment, reason: str) -> None:
        """An attempt on `d` that returned was dropped (`pipeline.unanswered`): `empty_answer`, or
        `hedge_lost` (its span's outcome `hedge_cancelled`, as a loser cancelled on its way)."""
        self.trace.dropped(d, "hedge_cancelled" if reason == "hedge_lost" else reason)

    def affinity(self, model: str, result: str) -> None:
        """A session's request of an `affinity: session` model was served: kept, moved or new."""
        self.m.child(self.m.affinity, model, result).inc()

    def routed(self, model: str, d: Deployment, policy: str) -> None:
        """Routing's first choice for the request (not its fallbacks or hedge), by the model's policy."""
        self.m.child(self.m.routing_decisions, model, d.label, policy).inc()

    def deployment_ttft(self, model: str, d: Deployment, api: str, average: float) -> None:
        """The learned upstream TTFT average of `d` for `api`, after this request's sample."""
        self.m.child(self.m.deployment_ttft, model, d.label, api).set(average)

    def hedge_won(self, model: str, winner: str) -> None:
        self.m.child(self.m.hedges, model, winner).inc()

    def upstream_first_token(self, model: str, d: Deployment, seconds: float) -> None:
        """The winning attempt: request sent to first output token received."""
        self.m.child(self.m.upstream_ttft, model, d.provider, d.label).observe(seconds)

    # -- the stream ----------------------------------------------------------------------------------

    def committed(self, t_first: float) -> None:
        """A stream committed to its winner (headers out); `t_first` is when its first token arrived."""
        self.trace.committed(t_first)

    def first_token(self, model: str, provider: str, seconds: float) -> None:
        """The first output token written to the client (TTFT; `provider` is `cache` for a hit)."""
        self.m.child(self.m.ttft, self.api, model, provider).observe(seconds)
        WINDOW.first_token(model, seconds)  # the console's last hour (observe/stats_window.py)

    def overhead(self, model: str, seconds: float) -> None:
        """The gateway's own share of the first token's time (docs/overhead.md)."""
        self.m.child(self.m.overhead, self.api, model).observe(seconds)
        WINDOW.overhead(model, seconds)  # the console's last hour (observe/stats_window.py)

    def text_delay(self, seconds: float) -> None:
        """Per write: how long the text spent inside the gateway."""
        delay = self._delay
        if delay is None:
            delay = self._delay = self.m.child(self.m.text_delay, self.api)
        delay.observe(seconds)

    def malformed_skipped(self, model: str, d: Deployment, n: int) -> None:
        self.m.child(self.m.malformed_events, model, d.label).inc(n)

    def stream_failed(self, model: str, d: Deployment, reason: str) -> None:
        """A failure after the first token."""
        self.m.child(self.m.stream_failures, model, d.label, reason).inc()

    def continuing(self, mode: str) -> None:
        """The next attempt continues the committed stream (its span says so)."""
        self.trace.continuing(mode)

    def continuation(self, model: str, d: Deployment, mode: str, outcome: str) -> None:
        """One continuation attempt on `d` (docs/continuation.md): prefill or regenerate; ok, diverged, failed."""
        self.m.child(self.m.continuations, model, d.label, mode, outcome).inc()

    def redactions(self, counts: Iterable[tuple[str, int]]) -> int:
        """Masked matches by rule; returns how many."""
        total = 0
        for rule, n in counts:
            if n:
                self.m.child(self.m.redactions, rule).inc(n)
                total += n
        return total

    # -- the answer ----------------------------------------------------------------------------------

    def usage(self, model: str, d: Deployment, usage: Usage | None, key: str) -> float:
        """Tokens and cost of one answer, attributed to the caller's key name; returns the cost."""
        m = self.m
        if usage is None:
            m.child(m.usage_missing, model, d.provider).inc()
            return 0.0
        for t in _TOKEN_FIELDS:
            v = getattr(usage, t)
            if v:
                m.child(m.tokens, model, d.provider, key, t).inc(v)
        cost = usage_cost(usage, d.price)
        if cost:
            m.child(m.cost, model, d.provider, key).inc(cost)
        return cost

    def answered(self, model: str, d: Deployment, usage: Usage | None, key: str) -> float:
        """The answer's usage (`usage`: tokens and cost, returned), kept as the answer's own: the GenAI
        token usage and the answering span's `gen_ai.usage.*` are its, not the request's whole charge."""
        self._answer = (d, usage)
        return self.usage(model, d, usage, key)

    def estimated(self, model: str, d: Deployment, key: str, charged: Usage, reported: Usage | None) -> None:
        """Tokens charged on the gateway's estimate, not the provider's count (`charged` less `reported`):
        kept apart from `llm_gateway_tokens_total`, which stays provider-reported."""
        m = self.m
        for t, n in zip(("input", "output"), estimated_part(charged, reported), strict=True):
            if n:
                m.child(m.estimated_tokens, model, d.provider, key, t).inc(n)

    def stream_ended(self, model: str, d: Deployment, usage: Usage | None, first_token_at: float | None,
                     key: str) -> float:
        """A committed stream's end (its terminator or error event is next): usage, cost and time per
        output token after the first; returns the cost."""
        cost = self.answered(model, d, usage, key)
        if usage is not None and usage.output > 1 and first_token_at is not None:
            per_token = self._tpot = (time.perf_counter() - first_token_at) / (usage.output - 1)
            self.m.child(self.m.tpot, self.api, model, d.provider).observe(per_token)
        self.trace.stream_ended()
        return cost

    def team_spend(self, team: str, model: str, cost: float) -> None:
        """One answered request of a stored key in `team` (a store name, bounded by the teams there are)."""
        self.m.child(self.m.team_requests, team, model).inc()
        if cost:
            self.m.child(self.m.team_cost, team, model).inc(cost)

    # -- the end -------------------------------------------------------------------------------------

    def finished(self, ctx: RequestContext | None, adm: Admission, end: End) -> None:
        """The request is over: in flight no more, its count and duration; its spans end."""
        m, api = self.m, self.api
        m.child(m.inflight, api).dec()
        duration = self._duration = time.perf_counter() - self.t0
        model = ctx.model.name if ctx else "unknown"  # the metric label: never the raw requested name
        stream = "true" if ctx and ctx.stream else "false"
        m.child(m.requests, api, model, stream, end.outcome, ctx.key_name if ctx else adm.key_name).inc()
        m.child(m.duration, api, model, stream, end.outcome).observe(duration)
        if ctx is not None:
            WINDOW.request(model, end.outcome)
        g = m.genai
        answer = self._answer
        if ctx is not None and g is not None and g.enabled:
            genai.record(g, m.child, api, ctx, duration, self._tpot, "" if end.outcome == "ok" else end.outcome,
                         answer)
        self.trace.finish(ctx, end.status, end.outcome, answer[1] if answer is not None else None)

    def log_line(self, ctx: RequestContext | None, adm: Admission, end: End) -> None:
        """The request's one log line, after its settlement. `model` is the configured model
        (`(unresolved)` with `model_unresolved`, the reason, when none was); `requested_model` the name as
        sent, cut; `reason` why a request did not succeed."""
        usage = ctx.usage if ctx else None
        key = ctx.key if ctx else adm.key
        write_info("request", {
            "request_id": self.request_id, "api": self.api, "model": ctx.model.name if ctx else UNRESOLVED,
            "model_unresolved": None if ctx else end.reason, "requested_model": adm.requested_model,
            "deployment": _deployment(ctx, end), "reason": end.reason, "key": key.name if key else None,
            "stream": bool(ctx and ctx.stream), "status": end.status, "outcome": end.outcome,
            "attempts": ctx.attempts if ctx else 0,
            "ttft_ms": round(ctx.ttft_s * 1000, 2) if ctx and ctx.ttft_s is not None else None,
            "overhead_ms": round(ctx.overhead_s * 1000, 3) if ctx and ctx.overhead_s is not None else None,
            "duration_ms": round(self._duration * 1000, 2), "input_tokens": usage.input if usage else None,
            "output_tokens": usage.output if usage else None, "cached_tokens": usage.cached_input if usage else None,
            "cache_creation_tokens": usage.cache_creation_input if usage else None,
            "cache_markers_dropped": ctx.cache_markers_dropped if ctx else 0,
            "reasoning_tokens": usage.reasoning if usage else None,
            "estimated": ctx.usage_estimated if ctx else False, "cost_usd": round(ctx.cost_usd, 8) if ctx else 0.0,
            "redactions": ctx.redactions if ctx else 0, "guardrails": dict(ctx.verdicts) if ctx else {},
            "stream_error": ctx.stream_error if ctx else None, "cache_hit": ctx.cache_hit if ctx else False,
            "continued": ctx.continued if ctx else None, "session_hash": ctx.session if ctx else adm.session,
            "affinity": ctx.affinity if ctx else None,
            "subject_hash": subject_hash(key.subject) if key is not None and key.subject else None,
            "transport": self.transport,
            "unanswered_attempts": [u.logged() for u in ctx.unanswered] if ctx and ctx.unanswered else None,
        })

    def refused(self, adm: Admission, end: End) -> None:
        """A request refused before it became one, that no handler saw (WebSocket mode: a message not read,
        nested too deep or too large before its response began, docs/reference.md, WebSocket mode): its
        count, span and line, as a request refused before its model resolved has them (model `unknown`)."""
        self.started()
        self.finished(None, adm, end)
        self.log_line(None, adm, end)

    # -- process-level facts a request found -------------------------------------------------------------

    def learned(self, deployment: str, api: str, fact: str, in_force: bool) -> None:
        """A learn-once fact this request learned (in force) or found expired: the process-level
        `llm_gateway_learned_fallbacks` gauge (`pipeline.learned` keeps the facts and logs them)."""
        self.m.learned(deployment, api, fact, in_force)


@functools.lru_cache(maxsize=4096)
def subject_hash(subject: str) -> str:
    """An IdP token's `sub` as the log line names it (docs/identity.md): hashed, as session ids are."""
    return hashlib.sha256(subject.encode()).hexdigest()[:32]


def _deployment(ctx: RequestContext | None, end: End) -> str | None:
    """The deployment that served; on a failure with none, the last one tried (docs/reference.md, "Logs")."""
    if ctx is None:
        return None
    if ctx.deployment is not None:
        return ctx.deployment.label
    return ctx.failed_deployment.label if ctx.failed_deployment is not None and end.reason else None
