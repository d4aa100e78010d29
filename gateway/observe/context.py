"""The per-request record: what the handler resolved and what the pipeline learned, for the metrics and
the one log line (CONTRACT §7). Holds no message text."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gateway.config.types import ApiKey, Deployment, ModelConfig
from gateway.core.events import Usage


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

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start
