"""Every Redis key the gateway writes (see lua.py for the layout). Each operation touches one key, or
several keys of one `{hash tag}`, so in a Redis Cluster every script and multi-key command runs on one
slot (docs/scale-out.md)."""

from __future__ import annotations

from gateway.state.base import Period, period_id

PREFIX = "llmgw:"


def rate_key(key: str, limit: str, minute: int) -> str:
    return f"{PREFIX}rl:{{{_tag(key)}}}:{limit}:{minute}"


def check_keys(key: str, minute: int) -> list[str]:
    """The four buckets the request check reads in one script: rpm then tpm, this minute and the last."""
    return [rate_key(key, "rpm", minute), rate_key(key, "rpm", minute - 1),
            rate_key(key, "tpm", minute), rate_key(key, "tpm", minute - 1)]


def spend_key(key: str, period: Period, now: float) -> str:
    return f"{PREFIX}spend:{{{_tag(key)}}}:{period_id(period, now)}"


def seeded_key(period: Period, now: float) -> str:
    """The marker that a period's spend counters were seeded from the ledger (one key, its own slot)."""
    return f"{PREFIX}spend-seeded:{period_id(period, now)}"


def cache_redis_key(cache_key: str) -> str:
    return f"{PREFIX}cache:{cache_key}"


def owner_key(response_id: str) -> str:
    return f"{PREFIX}owner:{{{_tag(response_id)}}}"


def served_key(name: str) -> str:
    """The set of models (and configured upstream names) an upstream-reported model name reached."""
    return f"{PREFIX}served:{{{_tag(name)}}}"


def _tag(key: str) -> str:
    """`key` as a hash tag, one to one: no two names share a tag (they would share rate windows, budgets,
    owners). A brace inside a tag would change which part Redis Cluster hashes, so `%`, `{` and `}` are
    percent-encoded (`%25`, `%7B`, `%7D`); any other name is its own tag, as it was when braces were
    replaced by parentheses (which made `a{b}` and `a(b)` one), so an upgrade resets no window or budget.
    The empty name (no counter, id or served name is empty) would be no tag at all (`{}`: the whole key
    hashed): it is `%`, a `%` without an escape after it, which no other name yields."""
    if not key:
        return "%"
    return key.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
