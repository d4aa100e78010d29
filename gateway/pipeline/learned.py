"""The shell around `core.policy.learned`: the clock, the expiry from the provider's `learn_ttl_s`, one
log line when a fact is learned and one when it expires, and the `llm_gateway_learned_fallbacks` gauge,
written through the recorder of the request that learned the fact or found it expired (`ctx.rec`).

Facts are per replica (like breakers) and survive a SIGHUP reload, bounded by their expiry: they describe
the upstream, which a reload of our config does not change.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from gateway.config.types import Deployment
from gateway.core.policy.learned import Fact, FactKey, LearnedFacts
from gateway.observe.context import RequestContext

log = structlog.get_logger("gateway")


class Learned:
    __slots__ = ("clock", "facts")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.facts = LearnedFacts()
        self.clock = clock  # monotonic seconds; replaceable so a test can step over an expiry

    def knows(self, ctx: RequestContext, d: Deployment, fact: Fact) -> bool:
        """Whether `d` learned `fact` for the request's API."""
        if self.facts.empty:  # the usual case: no key built, no clock read (twice per attempt)
            return False
        now = self.clock()
        self._expire(ctx, now)
        return self.facts.knows(FactKey(d.label, ctx.api, fact), now)

    def learn(self, ctx: RequestContext, d: Deployment, fact: Fact, ttl_s: float) -> None:
        now = self.clock()
        self._expire(ctx, now)
        key = FactKey(d.label, ctx.api, fact)
        if self.facts.learn(key, now, ttl_s):
            ctx.rec.learned(key.deployment, ctx.api, fact.value, True)
            log.warning("learned_upstream_fact", deployment=key.deployment, api=ctx.api, fact=fact.value,
                        ttl_s=ttl_s)

    def _expire(self, ctx: RequestContext, now: float) -> None:
        for key in self.facts.expire(now):
            ctx.rec.learned(key.deployment, key.api, key.fact.value, False)
            log.info("learned_upstream_fact_expired", deployment=key.deployment, api=key.api,
                     fact=key.fact.value)


def wants(learned: Learned, ctx: RequestContext, d: Deployment, fact: Fact) -> bool:
    """Whether this attempt uses the fallback: the deployment learned it for this API, or this very
    request is trying it after the deployment rejected the usual request."""
    return (d.label, fact) in ctx.fallbacks or learned.knows(ctx, d, fact)


def confirm(learned: Learned, ctx: RequestContext, d: Deployment, fact: Fact, ttl_s: float) -> None:
    """The attempt that used a fallback succeeded: if this request was trying it, the deployment learns
    it (a rejection alone proves nothing: the retry may fail the same way, and then it was the request)."""
    if (d.label, fact) in ctx.fallbacks:
        learned.learn(ctx, d, fact, ttl_s)
