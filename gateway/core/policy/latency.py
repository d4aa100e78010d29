"""What the `latency` routing policy learns: each deployment's upstream time to first token, per API, as a
decaying average of live traffic (docs/routing.md).

The average is a weighted mean of the samples, each sample's weight halving every `half_life_s` (30 s):
the decayed sum of samples over the decayed count. Reading it needs no clock (decay scales both alike),
so it is computed once per sample and a request only reads it. Two bounds make it follow a change within
seconds, not half-minutes:

- the decayed count is capped at `max_weight` samples: on a busy deployment the last few dozen requests
  outweigh everything older, so a deployment that slows down is shed after a handful of slow answers
  (the half-life alone would need more than 10 s, whatever the traffic);
- a sample that comes after `stale_s` without any restarts the average: evidence that old no longer
  says anything about the deployment, and the sample is usually a probe's, sent to find out.

A deployment with no sample for `stale_s` (or none yet) is due one probe request; a probe is claimed
when a request is routed to it, so each stale deployment gets one per `stale_s`, not one per request.

A request reads a tier through its `TierView` (one per API and tier): the tier's entries in order, the
earliest time any of them can be due a probe, and their ranking by average, made again at most every
`RERANK_S` (0.25 s) and only after a sample. So a request does no per-deployment work to rank a tier
and no lookup by label: on a busy model the ranking is made a few times a second, not per request.

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
RERANK_S = 0.25  # how late routing may follow a new sample (`TierView.ranking`)
LATENCY_MARGIN = 0.10  # those within 10% or 20 ms of the fastest share its load (docs/routing.md)
LATENCY_MARGIN_S = 0.020


class _Average:
    __slots__ = ("at", "average", "probed_at", "published_at", "total", "views", "weight")

    def __init__(self) -> None:
        self.total = 0.0  # decayed sum of samples (seconds)
        self.weight = 0.0  # decayed count of samples: 0 while there is none
        self.average = math.inf  # total / weight, once per sample; inf while there is none
        self.at = -math.inf  # when the last sample came
        self.probed_at = -math.inf  # when the last probe was sent
        self.published_at = -math.inf  # when the average was last handed to the metric
        self.views: list[TierView] = []  # the tiers this deployment is in, whose ranking a sample drops


class Ranking:
    """A tier by learned TTFT (positions in the tier): those within the margin of the fastest (all of the
    tier while nothing is known), then the slower ones fastest first, the unmeasured last."""

    __slots__ = ("near", "rest")

    def __init__(self, near: tuple[int, ...], rest: tuple[int, ...]) -> None:
        self.near, self.rest = near, rest


class TierView:
    """One tier's deployments, in the tier's order, as the book holds them for one API."""

    __slots__ = ("_ranking", "due_at", "entries", "moved", "ranked_at")

    def __init__(self, entries: tuple[_Average, ...], stale_s: float) -> None:
        self.entries = entries
        self._ranking: Ranking | None = None
        self.ranked_at = -math.inf
        self.moved = False  # a sample came for one of the entries since the ranking was made
        # no deployment of the tier is due a probe before this: a lower bound, as samples only move it later
        self.due_at = min(max(e.at, e.probed_at) for e in entries) + stale_s

    def ranking(self, now: float) -> Ranking:
        """The tier ranked by the averages, made again at most every RERANK_S and only after a sample:
        routing follows the averages at most that late (they take several samples to move past a
        margin anyway), and a busy tier is ranked a few times a second, not on every request."""
        ranking = self._ranking
        if ranking is None or (self.moved and now - self.ranked_at >= RERANK_S):
            ranking = self._ranking = _rank([e.average for e in self.entries])
            self.ranked_at, self.moved = now, False
        return ranking


def _rank(averages: list[float]) -> Ranking:
    best = min(averages)
    if best == math.inf:  # nothing known yet: shared
        return Ranking(tuple(range(len(averages))), ())
    limit = best + max(best * LATENCY_MARGIN, LATENCY_MARGIN_S)
    near: list[int] = []
    rest: list[int] = []
    for k, a in enumerate(averages):
        (near if a <= limit else rest).append(k)
    if len(rest) > 1:
        rest.sort(key=averages.__getitem__)
    return Ranking(tuple(near), tuple(rest))


class LatencyBook:
    """Decaying averages of upstream TTFT by API and deployment label. `now` is any monotonic clock's
    seconds, passed in by the caller (tests drive their own)."""

    __slots__ = ("_by_api", "_views", "half_life_s", "max_weight", "stale_s")

    def __init__(self, half_life_s: float = HALF_LIFE_S, stale_s: float = STALE_S,
                 max_weight: float = MAX_WEIGHT) -> None:
        self.half_life_s, self.stale_s, self.max_weight = half_life_s, stale_s, max_weight
        self._by_api: dict[str, dict[str, _Average]] = {}
        # by API, then by a tier's labels: bounded by the configs' tiers, as the entries are by their labels
        self._views: dict[str, dict[tuple[str, ...], TierView]] = {}

    def _entry(self, api: str, label: str) -> _Average:
        per_api = self._by_api.get(api)
        if per_api is None:
            per_api = self._by_api[api] = {}
        entry = per_api.get(label)
        if entry is None:
            entry = per_api[label] = _Average()
        return entry

    def observe(self, api: str, label: str, seconds: float, now: float) -> float | None:
        """One winning attempt's upstream TTFT. Returns the new average when it is due for its gauge (at
        most once per PUBLISH_EVERY_S per deployment and API: a scrape reads the gauge every few seconds,
        the average moves per request), else None."""
        per_api = self._by_api.get(api)
        e = per_api.get(label) if per_api is not None else None
        if e is None:
            e = self._entry(api, label)
        elapsed = now - e.at
        if elapsed >= self.stale_s or e.weight <= 0.0:
            e.total, e.weight = seconds, 1.0
        else:
            decay = 0.5 ** (elapsed / self.half_life_s) if elapsed > 0.0 else 1.0
            e.total, e.weight = e.total * decay + seconds, e.weight * decay + 1.0
            if e.weight > self.max_weight:
                e.total *= self.max_weight / e.weight
                e.weight = self.max_weight
        if now > e.at:
            e.at = now
        e.average = average = e.total / e.weight
        for view in e.views:
            view.moved = True
        if now - e.published_at < PUBLISH_EVERY_S:
            return None
        e.published_at = now
        return average

    def average(self, api: str, label: str) -> float | None:
        """The learned average in seconds, None while there is no sample."""
        per_api = self._by_api.get(api)
        e = per_api.get(label) if per_api is not None else None
        return e.average if e is not None and e.weight > 0.0 else None

    def view(self, api: str, labels: tuple[str, ...]) -> TierView:
        """The tier of these deployment labels, for this API."""
        per_api = self._views.get(api)
        if per_api is None:
            per_api = self._views[api] = {}
        view = per_api.get(labels)
        if view is None:
            view = per_api[labels] = TierView(tuple(self._entry(api, label) for label in labels), self.stale_s)
            for e in view.entries:
                e.views.append(view)
        return view

    def claim_probe(self, view: TierView, now: float) -> int:
        """The position of the tier's first deployment due a probe (no sample for `stale_s`, and no probe
        sent in that time), claimed: the caller's request is it. -1: none is due."""
        if now < view.due_at:
            return -1
        stale, due = self.stale_s, -1
        for k, e in enumerate(view.entries):
            if due < 0 and now - e.at >= stale and now - e.probed_at >= stale:
                e.probed_at, due = now, k
        view.due_at = min(max(e.at, e.probed_at) for e in view.entries) + stale
        return due

    def read(self, api: str, labels: Sequence[str]) -> list[float]:
        """Each label's average, `inf` while unknown."""
        return [self._entry(api, label).average for label in labels]
