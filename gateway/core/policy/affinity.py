"""Session affinity (docs/agents.md, "Session affinity" `affinity: session`): which session a request belongs to, and
how its serving went for the prompt cache.

A session is named by, in this order: the `X-Claude-Code-Session-Id` header (Claude Code), Codex's
`session-id` header (also spelled `session_id`), the body's `prompt_cache_key` (OpenAI's own cache
routing key, which Codex sets to its session), else the Messages body's `metadata.user_id` (Claude Code
puts its session there as well). The id is hashed at once: the digest ranks the deployments
(`routing.rendezvous_order`) and is all a log line or a span ever sees, so a client's session id, which
may be a bearer of identity, is never written anywhere.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "session_id")  # lower-case, in order
MAX_SESSION_CHARS = 512  # a longer "id" is no client's session id: routed as without one
DIGEST_HEX = 32  # 128 bits of SHA-256: no collision between sessions in practice, short in a log line


class AffinityResult(StrEnum):
    """The `result` label of `llm_gateway_affinity_total`."""

    KEPT = "kept"  # served by the session's own deployment (the first of its ranking)
    MOVED = "moved"  # its own deployment could not serve (breaker, failure before the first token)
    NEW = "new"  # the first request of the session this replica has seen


def session_digest(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The hashed session id of a request (see the module docstring), or None when it names none."""
    raw: object = None
    for h in SESSION_HEADERS:  # a loop, not a generator: this runs for every request
        value = headers.get(h)
        if value:
            raw = value
            break
    if raw is None:
        raw = body.get("prompt_cache_key")
    if raw is None:
        metadata = body.get("metadata")
        raw = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(raw, str) or not raw.strip() or len(raw) > MAX_SESSION_CHARS:
        return None
    return hashlib.sha256(raw.strip().encode()).hexdigest()[:DIGEST_HEX]


def affinity_result(home: str, served: str, seen_before: bool) -> AffinityResult:
    """How a session's request was served: `home` and `served` are deployment labels."""
    if not seen_before:
        return AffinityResult.NEW
    return AffinityResult.KEPT if served == home else AffinityResult.MOVED


class SeenSessions:
    """The sessions this replica has served lately (their digests), to tell `new` from the rest: bounded,
    the least recently seen forgotten first. Per replica, as breakers are: no request waits on another
    replica for it."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    def visit(self, digest: str) -> bool:
        """Whether `digest` was seen before; it is seen now."""
        before = digest in self._seen
        if before:
            self._seen.move_to_end(digest)
        else:
            self._seen[digest] = None
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
        return before
