"""The per-request record: what the handler resolved and what the pipeline learned, for the metrics and
the one log line (CONTRACT §7). Holds no message text."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gateway.config.types import ApiKey, Deployment, ModelConfig
from gateway.core.events import Usage
from gateway.observe.metrics import Metrics, record_stream_end
from gateway.observe.recorder import NO_TRACE, RequestTrace


@dataclass(slots=True)
class RequestContext:
    request_id: str
    api: str
    model: ModelConfig
    body: dict[str, Any]
    stream: bool
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
    reservation: Any = None  # state.base.Reservation of tokens reserved against the key's tpm
    cache_hit: bool = False
    cache_store: bool = False  # store the (masked) answer in the response cache when it succeeds
    trace: RequestTrace = NO_TRACE  # the request's spans (`observe.tracing`), when traced

    def stream_ended(self, m: Metrics, usage: Usage | None, first_token_at: float | None) -> None:
        """A committed stream has ended (its terminator or its error event is next), for every API: usage,
        cost and time per output token, on this record and the metrics. Called before the last write, so
        a client that reads the metrics right after the stream sees them."""
        assert self.deployment is not None
        self.usage = usage
        self.cost_usd = record_stream_end(m, self.api, self.model.name, self.deployment, usage, first_token_at,
                                          time.perf_counter(), self.key_name)
        self.trace.stream_ended()

    @property
    def key_name(self) -> str:
        """The `key` metric label (CONTRACT §6): the key's configured name, `none` without auth."""
        return self.key.name if self.key is not None else "none"

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start
