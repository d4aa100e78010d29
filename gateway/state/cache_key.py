"""The response cache's key: an exact match on everything in a request that can change the answer.

Fields are excluded by name rather than included by name, so a parameter we have never heard of
(a new sampling option, `reasoning_effort`, a provider extension) still separates two requests: a
cache that ignored it could serve one request's answer to a different request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

# Delivery and bookkeeping fields: the same answer whatever their value.
IGNORED_FIELDS = frozenset({"stream", "stream_options", "user", "metadata"})


def _normalise(value: Any) -> Any:
    """JSON says 1 and 1.0 are the same number; make `temperature: 1` and `1.0` one key."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)  # the bound keeps the int exact and within orjson's 64-bit range
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def cache_key(api: str, body: Mapping[str, Any]) -> str:
    """sha256 hex of the API name and the request body without delivery fields, key order ignored."""
    kept = {k: v for k, v in body.items() if k not in IGNORED_FIELDS}
    canonical = orjson.dumps({"api": api, "body": _normalise(kept)}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()
