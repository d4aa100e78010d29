"""The per-request record: what the handler resolved and what the pipeline learned, for the metrics and
the one log line (docs/reference.md, "Logs"). Holds no message text."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.config.types import ApiKey, Deployment, ModelConfig
from gateway.core.continuation import add_usage
from gateway.core.events import Usage
from gateway.core.policy.learned import Fact
from gateway.core.usage_estimate import charged, estimate_usage
from gateway.observe.metrics import usage_cost
from gateway.observe.record import RequestRecorder

_PROMPT_FIELDS = ("messages", "input", "instructions", "system", "tools")


REQUESTED_MODEL_CHARS = 128


@dataclass(frozen=True, slots=True)
class Admission:
    """What the request said of itself before (or without) a resolved model: the key it authenticated
    with, the model name as sent (cut to `REQUESTED_MODEL_CHARS`) and the session it belongs to. The log line's
    `key`, `requested_model` and `session_hash`, and the metrics' `key` label, on every answer, a 4xx included
    (docs/reference.md, "Logs")."""

    key: ApiKey | None = None
    requested_model: str | None = None
    session: str | None = None  # the session id's digest, once the body is read (a 404's line has it too)

    @property
    def key_name(self) -> str:
        return self.key.name if self.key is not None else "none"


@dataclass(frozen=True, slots=True)
class Unanswered:
    """An attempt the upstream was asked (and billed) that did not answer the client: an empty answer
    dropped for the next deployment, a hedge that lost, an attempt cut by the client's leaving or by a
    timeout (`pipeline.unanswered`). Charged to the request (`fold_unanswered`) and named in its log line."""

    deployment: str  # its label
    reason: str  # empty_answer, hedge_lost, client_gone, or a timeout's kind (first_token_timeout, ...)
    usage: Usage  # what it is charged: the provider's count, or (in part) the estimate
    cost_usd: float  # at its own deployment's price
    estimated: bool

    def logged(self) -> dict[str, object]:
        u = self.usage
        return {"deployment": self.deployment, "reason": self.reason, "input_tokens": u.input,
                "output_tokens": u.output, "cost_usd": round(self.cost_usd, 8), "estimated": self.estimated}


@dataclass(frozen=True, slots=True)
class Leg:
    """One attempt of a continued answer (`pipeline.continuation`), as it is charged: what its upstream
    reported (None: nothing), the bytes of output it sent, its prompt's bytes beyond the client's (a
    prefill's text so far), and whether its answer ended whole (else its usage is at most a floor)."""

    deployment: Deployment
    usage: Usage | None
    output_bytes: int
    prompt_extra: int = 0
    whole: bool = False


@dataclass(slots=True)
class RequestContext:
    request_id: str
    api: str  # the client API's name: the `api` label, the key of its learned facts and cache entries
    schema: str  # its wire schema: the row of the support matrix its deployments are served from
    model: ModelConfig
    body: dict[str, Any]
    stream: bool
    rec: RequestRecorder  # the one writer of this request's metrics, spans and log line
    key: ApiKey | None = None
    forward_usage: bool = False
    t_start: float = field(default_factory=time.perf_counter)
    deployment: Deployment | None = None
    attempts: int = 0
    ttft_s: float | None = None
    usage: Usage | None = None
    cost_usd: float = 0.0
    redactions: int = 0
    verdicts: dict[str, str] = field(default_factory=dict)
    stream_error: str | None = None  # reason, when a committed stream ended with an error event
    reservation: Any = None  # state.base.Reservation: the request and its tokens counted against the key's rpm, tpm
    team_reservation: Any = None  # the same against the key's team's (stored keys in a team)
    key_hold: Any = None  # state.base.SpendHold: its estimated cost held against the key's budget
    team_hold: Any = None  # the same against its team's budget
    spend_recorded: bool = False  # its row is in the spend ledger (`pipeline.ledger`): once per request
    cache_hit: bool = False
    cache_store: bool = False  # store the (masked) answer in the response cache when it succeeds
    # learn-once fallbacks this request is trying, per deployment label (docs/extensions.md, "Failure semantics"):
    # learned for the deployment only when the attempt that used one succeeds
    fallbacks: set[tuple[str, Fact]] = field(default_factory=set)
    usage_estimated: bool = False  # `usage` is (in part) our estimate: the provider reported none, or less
    # what the client sent (lower-case names; x-request-id is this request's id): the providers'
    # `forward_headers` pick from it
    client_headers: Mapping[str, str] = field(default_factory=dict)
    # headers every response to this request carries (x-request-id, x-ratelimit-*, CORS): the
    # inbound request's own dict, so a streamed head and an error answer both see them
    response_headers: dict[str, str] = field(default_factory=dict)
    # the last failed attempt's deployment and why it failed (a FailureKind value), for the log line
    # of a request that failed: `deployment` is only ever the one that served
    failed_deployment: Deployment | None = None
    failure_reason: str | None = None
    # the client's session id, hashed (`core.policy.affinity`): the log line's and span's `session_hash`
    # whenever the client named one; it ranks the deployments where the model has `affinity: session`
    session: str | None = None
    affinity: str | None = None  # kept, moved or new: how a session of an affinity model was served
    body_bytes: int = 0  # the request body's size: `routing: cost` estimates its input tokens from it
    continued: str | None = None  # the last continuation's `mode:outcome` (docs/continuation.md), for the log line
    cache_markers_dropped: int = 0  # the client's cache markers over Anthropic's limit (docs/caching.md)
    # the body may carry cache markers (`pipeline.request.read_json`); False: none to fit
    cache_marked: bool = True
    # the gateway's own share of the first token's time (docs/overhead.md): when the first attempt's
    # request left, when the winner's answer (its first token, or its whole body) was read, the share
    t_upstream: float = 0.0
    t_answer: float = 0.0
    overhead_s: float | None = None
    # attempts billed without answering (`Unanswered`), None while there is none; the first `folded` of
    # them are in `usage` and `cost_usd` already
    unanswered: list[Unanswered] | None = None
    folded: int = 0

    def stream_ended(self, usage: Usage | None, first_token_at: float | None) -> None:
        """A committed stream has ended (its terminator or its error event is next), for every API: usage,
        cost and time per output token, on this record and the metrics. Called before the last write, so
        a client that reads the metrics right after the stream sees them."""
        assert self.deployment is not None
        self.usage = usage
        self.cost_usd = self.rec.stream_ended(self.model.name, self.deployment, usage, first_token_at,
                                              self.key_name)

    @property
    def key_name(self) -> str:
        """The `key` metric label (docs/reference.md, "Metrics"): the key's configured name, `none` without auth."""
        return self.key.name if self.key is not None else "none"

    def estimate_unreported_usage(self, output_bytes: int) -> None:
        """The stream ended without its final usage (`usage` is what the provider reported so far, maybe
        None): charge the key's tpm and budget an estimate where it counts more (`settle` reads `usage`
        and `cost_usd`), logged as estimated; the token and cost metrics stay provider-reported."""
        assert self.deployment is not None
        usage = self.charge_of(self.deployment, self.usage, output_bytes)
        if usage is self.usage:
            return  # the provider's counts cover what came
        self.usage = usage
        self.usage_estimated = True
        self.cost_usd = usage_cost(usage, self.deployment.price)

    def prompt_bytes(self) -> int:
        """The prompt's size as the estimate reads it: the JSON of its parts."""
        return sum(len(orjson.dumps(self.body[k])) for k in _PROMPT_FIELDS if k in self.body)

    def charge_of(self, d: Deployment, so_far: Usage | None, output_bytes: int, *, whole: bool = False,
                  prompt_extra: int = 0) -> Usage:
        """What an attempt on `d` is charged: the provider's usage when its answer ended (`whole`) with
        one, else its counts so far raised to the estimate of its prompt (plus `prompt_extra` bytes) and
        `output_bytes` (`core.usage_estimate.charged`). The estimate's tokens go to
        `llm_gateway_estimated_tokens_total`; the provider's are the caller's to record (`rec.usage`)."""
        if whole and so_far is not None:
            return so_far
        usage = charged(so_far, estimate_usage(self.prompt_bytes() + prompt_extra, output_bytes))
        if usage is not so_far:
            self.rec.estimated(self.model.name, d, self.key_name, usage, so_far)
        return usage

    def charge_unanswered(self, d: Deployment, reason: str, so_far: Usage | None, output_bytes: int,
                          whole: bool = False) -> None:
        """An attempt on `d` the upstream billed that will not answer the client (`Unanswered`): its
        reported usage counted against its own deployment's provider (`llm_gateway_usage_missing_total`
        when an answer that ended carried none), its charge kept until `fold_unanswered`."""
        if so_far is not None or whole:
            self.rec.usage(self.model.name, d, so_far, self.key_name)
        usage = self.charge_of(d, so_far, output_bytes, whole=whole)
        entry = Unanswered(d.label, reason, usage, usage_cost(usage, d.price), usage is not so_far)
        if self.unanswered is None:
            self.unanswered = []
        self.unanswered.append(entry)

    def charge_legs(self, legs: Iterable[Leg]) -> None:
        """A continued stream's usage and cost (its key is charged) as the sum of its attempts' charges,
        each at its own deployment's price, estimated where its upstream reported no whole usage."""
        total, cost, estimated = None, 0.0, False
        for leg in legs:
            usage = self.charge_of(leg.deployment, leg.usage, leg.output_bytes, whole=leg.whole,
                                   prompt_extra=leg.prompt_extra)
            total, cost = add_usage(total, usage), cost + usage_cost(usage, leg.deployment.price)
            estimated = estimated or usage is not leg.usage
        self.usage, self.cost_usd, self.usage_estimated = total, cost, estimated

    def fold_unanswered(self) -> None:
        """The request's usage and cost (its spend row, tpm, budget and log line) with the charges of its
        unanswered attempts added, once its answer's are known (the relay's end, or the request's)."""
        assert self.unanswered is not None
        for u in self.unanswered[self.folded:]:
            self.usage = add_usage(self.usage, u.usage)
            self.cost_usd += u.cost_usd
            self.usage_estimated = self.usage_estimated or u.estimated
        self.folded = len(self.unanswered)

    def sent_upstream(self) -> float:
        """An attempt's request is built and about to leave (perf_counter, returned): the first one's time
        is kept, until `request_left` tells when it really left."""
        now = time.perf_counter()
        if not self.t_upstream:
            self.t_upstream = now
        return now

    def request_left(self, built: float, left: float) -> None:
        """The attempt whose request was built at `built` was written at `left` (`UpstreamResponse.sent_at`:
        a new connection's set-up taken out): when it is the first attempt, the gateway's own time before
        the upstream's ends there (taking a pooled connection, signing and the write are its own)."""
        if self.t_upstream == built and left > built:
            self.t_upstream = left

    def first_token_out(self, now: float, released: float = 0.0) -> None:
        """The first output token (a body: the answer) was written to the client at `now`: the gateway's
        own share is the time before the first attempt left plus the time from the winner's answer to
        this write; failed attempts, backoff, a hedge's delay and the upstream's own time lie between the
        two and are not counted, nor is a hold guardrail's wait (`released`: when its judging ended)."""
        if not self.t_upstream or not self.t_answer:
            return  # no upstream answered (a cache hit): no share to tell apart
        share = (self.t_upstream - self.t_start) + (now - max(self.t_answer, released))
        self.overhead_s = share = max(share, 0.0)
        self.rec.overhead(self.model.name, share)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start
