"""Every Redis key the gateway writes (see lua.py for the layout). Each operation touches one key, or
several keys of one `{hash tag}`, so in a Redis Cluster every script and multi-key command runs on one
slot (docs/scale-out.md); a response owner's write is three such steps (redis_owners.py)."""

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


def cache_keys(tenant: str, cache_key: str) -> list[str]:
    """What caching one answer touches (lua.CACHE_SET): the answer's key, the tenant's answers by time
    written, their sizes; all under the tenant's tag, with the answers it drops (`cache_prefix`)."""
    tag = _tag(tenant)
    return [cache_redis_key(tenant, cache_key), f"{PREFIX}cached:{{{tag}}}", f"{PREFIX}cached-bytes:{{{tag}}}"]


def cache_prefix(tenant: str) -> str:
    return f"{PREFIX}cache:{{{_tag(tenant)}}}:"


def cache_redis_key(tenant: str, cache_key: str) -> str:
    return cache_prefix(tenant) + cache_key


def owner_key(response_id: str) -> str:
    return f"{PREFIX}owner:{{{_tag(response_id)}}}"


def owned_key(tenant: str) -> str:
    """A tenant's response ids by time recorded (lua.OWN_RESPONSE); its own slot, as each record is in its
    id's (a lookup knows the id, not the owner)."""
    return f"{PREFIX}owned:{{{_tag(tenant)}}}"


def owned_items_key(tenant: str) -> str:
    """A tenant's output item ids by expiry (lua.OWN_RESPONSE writes them, lua.OWNED_ITEMS reads them): under
    the tag of `owned_key`, so the write that counts a response id counts its items in the same call."""
    return f"{PREFIX}owned-items:{{{_tag(tenant)}}}"


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
