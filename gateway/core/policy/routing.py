"""The order in which a request tries a model's deployments (CONTRACT §2 `routing`, §4.2).

- ordered: config order ("tried in this order").
- balanced: least in-flight first, ties broken at random, so equal deployments share the load; the
  others follow by the same key as fallbacks.

Either way a deployment whose breaker does not allow it is skipped. If every breaker refuses, the
plan is empty and the request fails at once (502): while every deployment is out of rotation, fast
failure beats queueing onto known-bad upstreams. Recovery does not wait on luck: once a cooldown has
passed, `allow()` admits that deployment's probe, so the next request carries the probe.

`allowed(label)` is the breaker's `allow()` and admitting a half-open probe uses the probe up. So
`iter_plan` asks lazily, once per deployment, just before the caller tries it; a probe slot is never
taken by a deployment that the request does not reach because an earlier one served it. Prefer
`iter_plan` in the attempt loop; `plan_order` asks about every deployment up front.

Session affinity (CONTRACT §10): a request of a session (`affinity.session_digest`) on a model with
`affinity: session` walks the session's own ranking, whatever `routing` says: rendezvous
(highest-random-weight) hashing of the session over the deployment labels. Every replica computes the
same ranking with no shared state; the session's home is the first, its failover and hedge the next, and
a deployment coming back or leaving moves only the sessions it ranks first (the others keep their order).
The breaker is still asked lazily, so a home out of rotation is skipped and, once its probe succeeds,
its sessions return to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal, Protocol

Routing = Literal["ordered", "balanced"]


class Labelled(Protocol):
    """What routing reads of a deployment (`config.types.Deployment`): its label."""

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


def candidate_order(
    deployments: Sequence[Labelled],
    routing: Routing,
    inflight: Mapping[str, int],
    rand: Callable[[], float],
    session: str | None = None,
) -> list[int]:
    """Every deployment index in routing order (the session's ranking when `session` is given: the
    model has `affinity: session` and the request named one), breakers not consulted."""
    if session is not None:
        return rendezvous_order(deployments, session)
    indexes = list(range(len(deployments)))
    if routing == "ordered":
        return indexes
    # One random draw per deployment breaks ties; sort is stable, so equal draws keep config order.
    keys = {i: (inflight.get(deployments[i].label, 0), rand()) for i in indexes}
    return sorted(indexes, key=keys.__getitem__)


def iter_plan(
    deployments: Sequence[Labelled],
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
    deployments: Sequence[Labelled],
    routing: Routing,
    inflight: Mapping[str, int],
    allowed: Callable[[str], bool],
    rand: Callable[[], float],
    session: str | None = None,
) -> list[int]:
    """The whole plan at once: `iter_plan` run to the end (see the module docstring about probes)."""
    return list(iter_plan(deployments, routing, inflight, allowed, rand, session))
