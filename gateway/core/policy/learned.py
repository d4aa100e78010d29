"""Learn-once facts (docs/extensions.md, "Failure semantics"): what an upstream told us about how it must be asked,
remembered per deployment (provider + upstream model) and API, for a while.

A fact is protocol negotiation, not health: "this deployment rejects `stream_options`", "it answers a
stream request with a JSON body", "it rejects `stream: false`". Scoping it to one deployment and one API
keeps one odd model on a multi-model upstream (OpenRouter, vLLM, an internal router) from switching every
other model, or the other API, to the fallback; the expiry lets an upstream that was fixed be probed
again. Pure: time comes in as `now`; the shell logs and exports what `learn` and `expire` report.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Fact(StrEnum):
    NO_STREAM_OPTIONS = "no_stream_options"  # ask without `stream_options` (usage is estimated)
    NO_STREAM = "no_stream"  # a stream request is answered buffered and re-emitted as a stream
    STREAM_ONLY = "stream_only"  # a non-stream request is streamed and assembled into a body
    NO_PREFILL = "no_prefill"  # rejects a trailing assistant message: continued by regenerating (docs/continuation.md)
    NO_PROMPT_CACHE_KEY = "no_prompt_cache_key"  # asked without `prompt_cache_key` / `prompt_cache_retention`


@dataclass(frozen=True, slots=True)
class FactKey:
    deployment: str  # `provider/model`, the deployment's label
    api: str  # chat, responses, messages
    fact: Fact


class LearnedFacts:
    """Facts in force, each with its expiry. Bounded by configuration: one entry per (deployment, api,
    fact), and deployments and APIs come from the config. Not thread-safe: the event loop's only."""

    __slots__ = ("_next_expiry", "_until")

    def __init__(self) -> None:
        self._until: dict[FactKey, float] = {}
        self._next_expiry = float("inf")

    @property
    def empty(self) -> bool:
        return not self._until

    def knows(self, key: FactKey, now: float) -> bool:
        """Whether the fact is in force at `now` (an expired one is not, even before `expire` ran)."""
        until = self._until.get(key)
        return until is not None and now < until

    def learn(self, key: FactKey, now: float, ttl_s: float) -> bool:
        """Remember the fact until `now + ttl_s`. True when it was not in force (the shell logs that)."""
        fresh = not self.knows(key, now)
        until = now + ttl_s
        self._until[key] = until
        self._next_expiry = min(self._next_expiry, until)
        return fresh

    def expire(self, now: float) -> list[FactKey]:
        """Forget the facts whose time is up, and name them. O(1) until the next expiry is due."""
        if now < self._next_expiry:
            return []
        gone = [k for k, until in self._until.items() if until <= now]
        for k in gone:
            del self._until[k]
        self._next_expiry = min(self._until.values(), default=float("inf"))
        return gone

    def in_force(self, now: float) -> list[FactKey]:
        return [k for k, until in self._until.items() if now < until]
