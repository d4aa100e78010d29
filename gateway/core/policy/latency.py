"""What the `latency` routing policy learns: each deployment's upstream time to first token, per API, as a
decaying average of live traffic (docs/routing.md).

The average is a weighted mean of the samples, each sample's weight halving every `half_life_s` (30 s):
the decayed sum of samples over the decayed count. Reading it needs no clock (decay scales both alike),
so a request pays one division per deployment. Two bounds make it follow a change within seconds, not
half-minutes:

- the decayed count is capped at `max_weight` samples: on a busy deployment the last few dozen requests
  outweigh everything older, so a deployment that slows down is shed after a handful of slow answers
  (the half-life alone would need more than 10 s, whatever the traffic);
- a sample that comes after `stale_s` without any restarts the average: evidence that old no longer
  says anything about the deployment, and the sample is usually a probe's, sent to find out.

A deployment with no sample for `stale_s` (or none yet) is due one probe request; a probe is claimed
when a request is routed to it, so each stale deployment gets one per `stale_s`, not one per request.

State is per replica and per process (as breakers are): each replica learns from its own traffic to the
same upstreams, which is the latency its own requests will see.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

HALF_LIFE_S = 30.0
STALE_S = 30.0
MAX_WEIGHT = 16.0


PUBLISH_EVERY_S = 1.0


class _Average:
    __slots__ = ("at", "probed_at", "published_at", "total", "weight")

    def __init__(self) -> None:
        self.total = 0.0  # decayed sum of samples (seconds)
        self.weight = 0.0  # decayed count of samples: 0 while there is none
        self.at = -math.inf  # when the last sample came
        self.probed_at = -math.inf  # when the last probe was sent
        self.published_at = -math.inf  # when the average was last handed to the metric


class LatencyBook:
    """Decaying averages of upstream TTFT by API and deployment label. `now` is any monotonic clock's
    seconds, passed in by the caller (tests drive their own)."""

    __slots__ = ("_by_api", "half_life_s", "max_weight", "stale_s")

    def __init__(self, half_life_s: float = HALF_LIFE_S, stale_s: float = STALE_S,
                 max_weight: float = MAX_WEIGHT) -> None:
        self.half_life_s, self.stale_s, self.max_weight = half_life_s, stale_s, max_weight
        self._by_api: dict[str, dict[str, _Average]] = {}

    def _entry(self, api: str, label: str) -> _Average:
        per_api = self._by_api.get(api)
        if per_api is None:
            per_api = self._by_api[api] = {}
        entry = per_api.get(label)
        if entry is None:
            entry = per_api[label] = _Average()
        return entry

    def observe(self, api: str, label: str, seconds: float, now: float) -> float:
        """One winning attempt's upstream TTFT; returns the new average."""
        e = self._entry(api, label)
        elapsed = now - e.at
        if elapsed >= self.stale_s or e.weight <= 0.0:
            e.total, e.weight = seconds, 1.0
        else:
            decay = 0.5 ** (max(elapsed, 0.0) / self.half_life_s)
            e.total, e.weight = e.total * decay + seconds, e.weight * decay + 1.0
            if e.weight > self.max_weight:
                e.total *= self.max_weight / e.weight
                e.weight = self.max_weight
        e.at = max(e.at, now)
        return e.total / e.weight

    def publish_due(self, api: str, label: str, now: float) -> bool:
        """Whether the learned average is due for its gauge (at most once per PUBLISH_EVERY_S per
        deployment and API: the gauge is read by a scrape every few seconds, the average moves per request)."""
        e = self._entry(api, label)
        if now - e.published_at < PUBLISH_EVERY_S:
            return False
        e.published_at = now
        return True

    def average(self, api: str, label: str) -> float | None:
        """The learned average in seconds, None while there is no sample."""
        per_api = self._by_api.get(api)
        e = per_api.get(label) if per_api is not None else None
        return e.total / e.weight if e is not None and e.weight > 0.0 else None

    def read(self, api: str, labels: Sequence[str], now: float, probe: bool) -> tuple[list[float], int]:
        """One request's view of a tier, in one pass: each label's average (`inf` while unknown) and, when
        `probe`, the position of the first deployment due a probe, claimed (-1: none is due)."""
        per_api = self._by_api.get(api)
        if per_api is None:
            per_api = self._by_api[api] = {}
        stale, due, out = self.stale_s, -1, []
        for k, label in enumerate(labels):
            e = per_api.get(label)
            if e is None:
                e = per_api[label] = _Average()
            if probe and due < 0 and now - e.at >= stale and now - e.probed_at >= stale:
                e.probed_at, due = now, k
            out.append(e.total / e.weight if e.weight > 0.0 else math.inf)
        return out, due

    def claim_probe(self, api: str, label: str, now: float) -> bool:
        """Whether this deployment is due a probe (no sample for `stale_s`, and no probe sent in that
        time); if so, the caller's request is it."""
        e = self._entry(api, label)
        if now - e.at < self.stale_s or now - e.probed_at < self.stale_s:
            return False
        e.probed_at = now
        return True
