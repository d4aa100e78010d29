"""The order in which a request tries a model's deployments (docs/routing.md; docs/reference.md,
`routing` and `tier`).

Tiers first: every deployment of a lower `tier` is tried before any of a higher one, so a later tier gets
no traffic while an earlier one can serve. Inside a tier the model's `routing` policy orders them
(`core.policy.tiers`: ordered, balanced, weighted, latency, cost). One exception: a tier with no
deployment the policy may pick first (under `weighted`, weight-0 ones only) is all fallbacks, so the
first tier that has one goes ahead of it. A hedge stays in its primary's tier (`hedge_end`).

Either way a deployment whose breaker does not allow it is skipped. If every breaker refuses, the
plan is empty and the request fails at once (502): while every deployment is out of rotation, fast
failure beats queueing onto known-bad upstreams. Recovery does not wait on luck: once a cooldown has
passed, `allow()` admits that deployment's probe, so the next request carries the probe.

`allowed(label)` is the breaker's `allow()` and admitting a half-open probe uses the probe up. So
`iter_plan` asks lazily, once per deployment, just before the caller tries it; a probe slot is never
taken by a deployment that the request does not reach because an earlier one served it. Prefer
`iter_plan` in the attempt loop; `plan_order` asks about every deployment up front.

Session affinity (docs/agents.md): a request of a session (`affinity.session_digest`) on a model with
`affinity: session` ranks, by rendezvous (highest-random-weight) hashing of the session over the
deployment labels, only the deployments the policy may pick for a first attempt: those of the first tier,
under `weighted` those with weight > 0 (in proportion to it), under `ordered` only the first (so affinity
changes nothing there), under `latency` those within the margin of the fastest, under `cost` the
cheapest. They take the
places the policy gave them, in the session's order; every other deployment keeps its place. So a client
choosing its session id can never reach a fallback-only, more expensive or later-tier deployment while
the policy's own first choices can serve. Every replica computes the same ranking with no shared state;
the session's home is the first (`route_session` names it: a `latency` probe may go ahead of it), its
failover and hedge the next, and a deployment coming back or leaving moves only the sessions it ranks
first. The breaker is still asked lazily, so a home out of rotation is skipped and, once its probe
succeeds, its sessions return to it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from gateway.core.policy.tiers import Routable, RouteTable, Routing, Signals, order_tier

__all__ = ["Labelled", "RouteTable", "Routing", "Signals", "candidate_order", "hedge_end", "iter_plan",
           "plan_order", "rendezvous_order", "route", "route_session"]


class Labelled(Protocol):
    """What rendezvous hashing reads of a deployment: its label."""

    @property
    def label(self) -> str: ...


def rendezvous_weight(label: str, session: str) -> int:
    """The session's weight for one deployment: a stable hash of both (never Python's `hash`, which
    differs between processes), so every replica ranks alike."""
    digest = hashlib.blake2b(f"{label}\0{session}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous_order(deployments: Sequence[Labelled], session: str) -> list[int]:
    """Every deployment index, the session's highest weight first (ties, all but impossible in 64 bits,
    keep config order)."""
    weights = [rendezvous_weight(d.label, session) for d in deployments]
    return sorted(range(len(deployments)), key=lambda i: -weights[i])


def route(deployments: Sequence[Routable], table: RouteTable, routing: Routing, sig: Signals,
          session: str | None = None) -> list[int]:
    """Every deployment index in the order a request tries them, tier by tier, breakers not consulted.
    `session`: the model has `affinity: session` and the request named one (see the module docstring)."""
    if routing == "ordered":  # affinity changes nothing here: only the first may be a first choice
        return list(table.flat)
    if session is None and len(table.tiers) == 1:  # the common case, without the loop's bookkeeping
        return order_tier(deployments, table.tiers[0], table.tier_labels[0], routing, sig, True)[0]
    return _by_tiers(deployments, table, routing, sig, session)[0]


def route_session(deployments: Sequence[Routable], table: RouteTable, routing: Routing, sig: Signals,
                  session: str) -> tuple[list[int], int]:
    """`route` for a request of a session, and the session's home: the first of its ranking of the policy's
    first choices, which `llm_gateway_affinity_total` compares the serving deployment with. Not always the
    plan's first: a `latency` probe goes ahead of it."""
    if routing == "ordered":
        return list(table.flat), table.flat[0] if table.flat else -1
    return _by_tiers(deployments, table, routing, sig, session)


def _by_tiers(deployments: Sequence[Routable], table: RouteTable, routing: Routing, sig: Signals,
              session: str | None) -> tuple[list[int], int]:
    """The plan tier by tier, and the home (without a session, the policy's first choice). The first tier is
    the first that has a first choice: a tier before it has none (under `weighted`, weight-0 deployments
    only), so it serves as a fallback, right after that tier."""
    out: list[int] = []
    held: list[int] = []  # the tiers with no first choice before the first that has one
    home = -1
    for t, tier in enumerate(table.tiers):
        first = home < 0
        # a session's ranking replaces the order of the first choices, the one thing the draws decide
        draws = sig if session is None or not first else sig.without_draws()
        order, firsts, probe = order_tier(deployments, tier, table.tier_labels[t], routing, draws, first)
        if not first:
            out += order
        elif not firsts:
            held += order
        else:
            home = firsts[0]
            if session is not None and len(firsts) > 1:
                home, order = _session_order(deployments, order, firsts, probe, session, routing == "weighted")
            out += order
            out += held
    return (out, home) if home >= 0 else (held, held[0] if held else -1)


def _session_order(deployments: Sequence[Routable], order: list[int], firsts: list[int], probe: int, session: str,
                   weighted: bool) -> tuple[int, list[int]]:
    """The session's home and the tier's order with its ranking of the first choices in their places; a
    `latency` probe keeps its place ahead of them (it is the home only if the session ranks it first)."""
    ranked = _session_ranking(deployments, firsts, session, weighted=weighted)
    movable = [i for i in ranked if i != probe] if probe >= 0 else ranked
    chosen = set(movable)
    it = iter(movable)
    return ranked[0], [next(it) if i in chosen else i for i in order]


def hedge_end(deployments: Sequence[Routable], order: Sequence[int], pos: int) -> int:
    """The position in `order` past the deployments of `order[pos]`'s tier: a hedge of the attempt at `pos`
    starts only before it. A later tier serves when the primary's cannot, and a primary that is only slow
    can (docs/routing.md, "Tiers"); `order` holds each tier's deployments together."""
    tier, end = deployments[order[pos]].tier, pos + 1
    while end < len(order) and deployments[order[end]].tier == tier:
        end += 1
    return end


def _session_ranking(deployments: Sequence[Routable], firsts: list[int], session: str, *,
                     weighted: bool) -> list[int]:
    """The session's ranking of the first choices. Under `weighted`, weighted rendezvous hashing (each
    deployment's key is `weight / -ln(u)`, `u` its hash in (0, 1)): sessions make their homes in
    proportion to the weights, so a 5% canary is home to about 5% of sessions, not half of them. With
    equal weights the key orders as the hash does: the plain ranking."""
    if not weighted:
        return sorted(firsts, key=lambda i: -rendezvous_weight(deployments[i].label, session))
    keys = {i: deployments[i].weight / -math.log((rendezvous_weight(deployments[i].label, session) + 0.5) / 2**64)
            for i in firsts}
    return sorted(firsts, key=lambda i: -keys[i])


def candidate_order(
    deployments: Sequence[Routable],
    routing: Routing,
    inflight: Mapping[str, int],
    rand: Callable[[], float],
    session: str | None = None,
) -> list[int]:
    """`route` with nothing learned (latency routes as balanced then) and a table made on the spot."""
    return route(deployments, RouteTable.of(deployments), routing, Signals(inflight, rand), session)


def iter_plan(
    deployments: Sequence[Routable],
    routing: Routing,
    inflight: Mapping[str, int],
    allowed: Callable[[str], bool],
    rand: Callable[[], float],
    session: str | None = None,
) -> Iterator[int]:
    """Yield the deployments to try, asking `allowed` about each only when the caller gets that far.

    The order is fixed when the iterator is created: in-flight counts that change during the
    request do not reshuffle its fallbacks.
    """
    order = candidate_order(deployments, routing, inflight, rand, session)

    def gen() -> Iterator[int]:
        for i in order:
            if allowed(deployments[i].label):
                yield i

    return gen()


def plan_order(
    deployments: Sequence[Routable],
    routing: Routing,
    inflight: Mapping[str, int],
    allowed: Callable[[str], bool],
    rand: Callable[[], float],
    session: str | None = None,
) -> list[int]:
    """The whole plan at once: `iter_plan` run to the end (see the module docstring about probes)."""
    return list(iter_plan(deployments, routing, inflight, allowed, rand, session))
