"""The routing policies inside one tier (docs/routing.md): each orders a tier's deployments and names the
ones it may pick for a first attempt, which is all session affinity may rank (so a client's session id can
never choose a fallback-only or last-resort deployment).

- ordered: config order; only the first may be a first choice.
- balanced: least in flight first, ties at random; any may be a first choice.
- weighted: a draw in proportion to `weight` (weighted sampling without replacement: each deployment's
  key is `u ** (1 / weight)` for a uniform `u`, highest first, compared as `ln(u) / weight` so that no
  scale of weights rounds it), then the weight-0 ones in config order,
  which serve only as fallbacks.
- latency: the lowest learned upstream TTFT wins; those within `LATENCY_MARGIN` (10%) or
  `LATENCY_MARGIN_S` (20 ms) of it share the load as `balanced` does; slower ones follow, fastest first,
  and deployments with no data last. While nothing is known the whole tier is shared. A deployment due a
  probe (`latency.LatencyBook.claim_probe`) goes first, once, on a request that can measure it (`Signals.probes`:
  a stream). The ranking is the book's
  (`latency.TierView.ranking`, made again at most every 0.25 s after a sample), so a request only shares
  the near-fastest out.
- cost: the lowest price for the request's estimated tokens first, equal prices by learned latency.

Everything is a pure function of its inputs and the `rand` draws, so a seeded source gives the same order.
The per-request work is a handful of float operations per deployment of a tier; no policy allocates more
than the small lists it returns (and `latency`, between samples, not even the ranking).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.core.policy.latency import LATENCY_MARGIN, LATENCY_MARGIN_S, LatencyBook, Ranking

__all__ = ["LATENCY_MARGIN", "LATENCY_MARGIN_S", "ROUTING_POLICIES", "RouteTable", "Routing", "Signals",
           "order_tier"]

Routing = Literal["ordered", "balanced", "weighted", "latency", "cost"]
ROUTING_POLICIES: tuple[Routing, ...] = ("ordered", "balanced", "weighted", "latency", "cost")
DEFAULT_OUTPUT_TOKENS = 1000  # `cost` without the request's max_tokens


class Priced(Protocol):
    @property
    def input(self) -> float: ...
    @property
    def output(self) -> float: ...


class Routable(Protocol):
    """What routing reads of a deployment (`config.types.Deployment`)."""

    @property
    def label(self) -> str: ...
    @property
    def tier(self) -> int: ...
    @property
    def weight(self) -> float: ...
    @property
    def price(self) -> Priced: ...


@dataclass(frozen=True, slots=True)
class RouteTable:
    """A model's deployments grouped by tier, lowest first, config order inside: compiled once per config
    (`config.types.ModelConfig.table`), not per request."""

    tiers: tuple[tuple[int, ...], ...]
    tier_labels: tuple[tuple[str, ...], ...]  # the deployments' labels, tier by tier
    flat: tuple[int, ...]  # every index, tier by tier: `ordered`'s whole plan

    @staticmethod
    def of(deployments: Sequence[Routable]) -> RouteTable:
        levels = sorted({d.tier for d in deployments})
        tiers = tuple(tuple(i for i, d in enumerate(deployments) if d.tier == t) for t in levels)
        labels = tuple(tuple(deployments[i].label for i in tier) for tier in tiers)
        return RouteTable(tiers, labels, tuple(i for tier in tiers for i in tier))


class Signals:
    """What one request's routing reads besides the config: made once per request (a plain class: a
    frozen dataclass's __init__ costs a microsecond more, on every request)."""

    __slots__ = ("api", "book", "inflight", "input_tokens", "now", "output_tokens", "probes", "rand")

    def __init__(self, inflight: Mapping[str, int], rand: Callable[[], float], book: LatencyBook | None = None,
                 api: str = "", now: float = 0.0, input_tokens: int = 0,
                 output_tokens: int = DEFAULT_OUTPUT_TOKENS, probes: bool = True) -> None:
        self.inflight, self.rand = inflight, rand
        self.book = book  # learned TTFTs (latency, cost's ties); None: nothing learned
        self.api, self.now = api, now  # the book's key and clock
        self.input_tokens, self.output_tokens = input_tokens, output_tokens  # cost's estimate of the request
        # may this request carry a `latency` probe: only one whose first token is a sample (a stream) can
        self.probes = probes

    def without_draws(self) -> Signals:
        return Signals(self.inflight, _no_draw, self.book, self.api, self.now, self.input_tokens,
                       self.output_tokens, self.probes)


def _no_draw() -> float:
    return 0.5


# (the tier's order, the deployments of it the policy may pick first, the one carrying a `latency` probe or -1).
# A probe goes first whatever the ranking; it is among the first choices only if it is near the fastest.
TierOrder = tuple[list[int], list[int], int]


def order_tier(deployments: Sequence[Routable], tier: Sequence[int], labels: tuple[str, ...], routing: Routing,
               sig: Signals, first_tier: bool) -> TierOrder:
    """One tier's deployments (indexes into `deployments`, `labels` theirs) in the order `routing` tries
    them."""
    if routing == "ordered":
        order = list(tier)
        return order, order[:1], -1
    if routing == "weighted":
        return _weighted(deployments, tier, sig.rand)
    if routing == "latency" and sig.book is not None:
        return _latency(deployments, tier, labels, sig, first_tier)
    if routing == "cost":
        return _cost(deployments, tier, labels, sig)
    order = _balanced(deployments, tier, sig)
    return order, order, -1


def _balanced(deployments: Sequence[Routable], indexes: Sequence[int], sig: Signals) -> list[int]:
    return _share(indexes, [deployments[i].label for i in indexes], range(len(indexes)), sig)


def _share(indexes: Sequence[int], labels: Sequence[str], positions: Sequence[int], sig: Signals) -> list[int]:
    """`indexes[k]` for each `k` of `positions`, least in flight first (by `labels[k]`), ties at random.
    One draw per deployment, halved and added to its in-flight count: a count is a whole number and a half
    draw below 0.5, so the sums order by count first, and equal counts by the draws; equal sums (equal
    draws) keep the order of `positions`."""
    get, rand = sig.inflight.get, sig.rand
    keys: list[float] = []
    out: list[int] = []
    for k in positions:  # an insertion sort: a tier has a few deployments
        key = get(labels[k], 0) + 0.5 * rand()
        j = bisect_right(keys, key)
        keys.insert(j, key)
        out.insert(j, indexes[k])
    return out


def _weighted(deployments: Sequence[Routable], tier: Sequence[int], rand: Callable[[], float]) -> TierOrder:
    keys: dict[int, float] = {}
    for i in tier:
        w = deployments[i].weight
        if w > 0.0:
            # `u ** (1 / w)` ordered by its logarithm, `ln(u) / w` (`u` = 1 - rand() in (0, 1]): the power
            # itself rounds to 0.0 for small weights and to 1.0 for huge ones, and ties went to config order
            keys[i] = math.log1p(-rand()) / w
    drawn = sorted(keys, key=keys.__getitem__, reverse=True)
    if not drawn:  # a tier of weight-0 deployments only: fallbacks, in config order
        return list(tier), [], -1
    return drawn + [i for i in tier if i not in keys], drawn, -1


def _latency(deployments: Sequence[Routable], tier: Sequence[int], labels: tuple[str, ...], sig: Signals,
             first_tier: bool) -> TierOrder:
    book = sig.book
    assert book is not None
    view = book.view(sig.api, labels)
    ranking = view.ranking(sig.now)
    # probes stay in the first tier: a later one gets no traffic while this one serves; and go to requests
    # that can measure them (a probe taken by one that cannot is lost for `stale_s`)
    due = book.claim_probe(view, sig.now) if first_tier and sig.probes and sig.now >= view.due_at else -1
    if due >= 0:
        return _with_probe(tier, labels, ranking, due, sig)
    near, rest = ranking.near, ranking.rest
    firsts = _share(tier, labels, near, sig) if len(near) > 1 else [tier[near[0]]]
    return (firsts + [tier[k] for k in rest] if rest else firsts[:]), firsts, -1


def _with_probe(tier: Sequence[int], labels: Sequence[str], ranking: Ranking, due: int, sig: Signals) -> TierOrder:
    """The tier with the deployment at `due` first, for its probe; the others as ranked. The first choices
    are the near ones as without the probe (a session's home does not depend on when a probe is due)."""
    shared = _share(tier, labels, [k for k in ranking.near if k != due], sig)
    firsts = [*shared, tier[due]] if due in ranking.near else shared
    return [tier[due], *shared, *(tier[k] for k in ranking.rest if k != due)], firsts, tier[due]


def _cost(deployments: Sequence[Routable], tier: Sequence[int], labels: Sequence[str], sig: Signals) -> TierOrder:
    book = sig.book
    latencies = book.read(sig.api, labels) if book is not None else [0.0] * len(tier)
    keys: dict[int, tuple[float, float]] = {}
    for k, i in enumerate(tier):
        price = deployments[i].price
        keys[i] = (sig.input_tokens * price.input + sig.output_tokens * price.output, latencies[k])
    order = sorted(tier, key=keys.__getitem__)
    cheapest = keys[order[0]][0]
    return order, [i for i in order if keys[i][0] == cheapest], -1


