"""What the Redis backend reads back and decides without Redis (redis.py): a stored response owner, the
reason an operation failed (a metric label), a refusal, and one process's share of a limit while Redis
is away (docs/scale-out.md)."""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterUnreachableError, SlotNotCoveredError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.state.base import LimitDecision, ResponseOwner


def owner_of(raw: object) -> ResponseOwner | None:
    """A stored `[key, team]`; anything else is no record (unknown), never an error."""
    try:
        value = orjson.loads(raw) if isinstance(raw, bytes) else None
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(v is None or isinstance(v, str) for v in value)):
        return None
    return ResponseOwner(key=value[0], team=value[1])


def reason_of(exc: BaseException) -> str:
    """A small fixed vocabulary, fit for a metric label."""
    if isinstance(exc, TimeoutError | RedisTimeoutError):
        return "timeout"
    if isinstance(exc, RedisConnectionError | OSError | RedisClusterUnreachableError | SlotNotCoveredError):
        return "unreachable"
    return "error"


def log() -> Any:
    # Fetched at each use (only on outage and recovery), so a logger cached by structlog's
    # cache_logger_on_first_use cannot outlive a reconfiguration such as capture_logs in tests.
    return structlog.get_logger("gateway.state")


def refusal(decision: LimitDecision, rpm: int | None) -> LimitDecision:
    """Redis refused, so the answer is a refusal even if Python's arithmetic would differ.

    Both compute the same comparison on the same doubles, so this guards against a future divergence
    between lua.py and window.py rather than a known case: Redis counted nothing, so never admit.
    """
    if not decision.allowed:
        return decision
    return LimitDecision(allowed=False, retry_after_s=1.0, limit="rpm" if rpm is not None else "tpm")


def local_share(limit: int | None, processes: int) -> int | None:
    """One process's part of a limit while Redis is away: limit / (replicas x workers), rounded down so
    the processes together stay within the limit, but at least 1 so a key is never shut out entirely;
    a limit of 0 stays 0, a key or team frozen on purpose (docs/keys-teams-spend.md)."""
    if limit is None:
        return None
    return min(limit, max(1, limit // processes))
