"""This process's own recent numbers per model, for `GET /admin/v1/stats` (docs/console.md, Stats).

The Prometheus histograms count since the process started (and, with `--workers`, are shared files),
so they cannot answer "the last hour"; this keeps a small ring of one-minute buckets per model instead,
fed by the request recorder (`observe.record`). Everything is bounded: 60 buckets per model, at most
`SAMPLES` time-to-first-token samples and `SAMPLES` overhead samples per bucket (two reservoirs), at
most `MAX_MODELS` models (model names are the configured ones, so the cap is only a guard across reloads).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

BUCKET_S = 60
BUCKETS = 60  # one hour: the longest window answered
MAX_WINDOW_S = BUCKET_S * BUCKETS
SAMPLES = 256
MAX_MODELS = 512
# the `outcome`s counted as errors: the gateway or its upstream failed (docs/reference.md, Metrics);
# a client's own mistake, a limit or a guardrail's refusal is the gateway working as configured
ERROR_OUTCOMES = frozenset({"upstream_error", "timeout"})


class _Bucket:
    __slots__ = ("errors", "minute", "overhead", "overhead_seen", "requests", "seen", "ttft")

    def __init__(self, minute: int):
        self.minute, self.requests, self.errors, self.seen, self.overhead_seen = minute, 0, 0, 0, 0
        self.ttft: list[float] = []
        # the gateway's own share of the first token's time (docs/overhead.md), sampled like `ttft`
        self.overhead: list[float] = []


@dataclass(frozen=True, slots=True)
class ModelStats:
    model: str
    requests: int
    errors: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    overhead_p50_s: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


class RollingStats:
    def __init__(self, clock: Callable[[], float] = time.monotonic, seed: int | None = None):
        self._clock = clock
        self._models: dict[str, list[_Bucket | None]] = {}
        self._random = random.Random(seed)

    def _bucket(self, model: str) -> _Bucket | None:
        ring = self._models.get(model)
        if ring is None:
            if len(self._models) >= MAX_MODELS:
                return None
            ring = self._models[model] = [None] * BUCKETS
        minute = int(self._clock() // BUCKET_S)
        b = ring[minute % BUCKETS]
        if b is None or b.minute != minute:  # a bucket an hour old is reused
            b = ring[minute % BUCKETS] = _Bucket(minute)
        return b

    def request(self, model: str, outcome: str) -> None:
        """A request for `model` ended with `outcome`."""
        b = self._bucket(model)
        if b is not None:
            b.requests += 1
            b.errors += outcome in ERROR_OUTCOMES

    def first_token(self, model: str, seconds: float) -> None:
        b = self._bucket(model)
        if b is not None:
            b.seen += 1
            self._keep(b.ttft, b.seen, seconds)

    def overhead(self, model: str, seconds: float) -> None:
        """The gateway's own share of a request's first token (docs/overhead.md), sampled as `first_token`."""
        b = self._bucket(model)
        if b is not None:
            b.overhead_seen += 1
            self._keep(b.overhead, b.overhead_seen, seconds)

    def _keep(self, samples: list[float], seen: int, seconds: float) -> None:
        """Reservoir sampling: every one of the minute's `seen` samples equally likely to be kept."""
        if len(samples) < SAMPLES:
            samples.append(seconds)
        else:
            i = self._random.randrange(seen)
            if i < SAMPLES:
                samples[i] = seconds

    def snapshot(self, window_s: int) -> list[ModelStats]:
        """Per model with a request in the last `window_s` (rounded up to whole minutes), by name."""
        now = int(self._clock() // BUCKET_S)
        oldest = now - min(BUCKETS, max(1, -(-window_s // BUCKET_S))) + 1
        out = []
        for model in sorted(self._models):
            live = [b for b in self._models[model] if b is not None and oldest <= b.minute <= now]
            requests = sum(b.requests for b in live)
            if not requests:
                continue
            samples = sorted(s for b in live for s in b.ttft)
            overhead = sorted(s for b in live for s in b.overhead)
            out.append(ModelStats(model, requests, sum(b.errors for b in live), _quantile(samples, 0.5),
                                  _quantile(samples, 0.95), _quantile(overhead, 0.5)))
        return out


def _quantile(sorted_samples: list[float], q: float) -> float | None:
    """Nearest rank."""
    if not sorted_samples:
        return None
    rank = max(1, -(-int(q * 1000) * len(sorted_samples) // 1000))
    return sorted_samples[min(rank, len(sorted_samples)) - 1]


# this process's window: a replica's own numbers (with `--workers`, each worker keeps its own)
WINDOW = RollingStats()
