"""IdP tokens on the data plane (docs/identity.md): the decisions that need no crypto and no I/O.

- `looks_like_jwt`: whether a bearer credential has the shape of a signed JWT (three base64url parts,
  a JSON header). Only such a credential is verified as a token; anything else is a gateway key.
- `grant_for`: what a verified token's claims grant: the team and the models, from the configured
  group mapping (the union of the mapped groups' models; the team is the first mapped group's in config
  order, else the team claim's), or a refusal.
- `claims_fault`: what is wrong with a verified token's time claims and subject, if anything: PyJWT
  takes any value `int()` accepts (a digit string, `true`, an integer of 400 digits), and the subject
  is stored in the ledger and the audit log, where a NUL or a lone surrogate fails the write.
- `RefetchGate`: at most one JWKS refetch per interval for unknown `kid`s, so a flood of tokens with
  made-up key ids costs the IdP one request per interval, not one per token.
- `TokenCache`: a verified token is verified once until it expires (or its key is withdrawn); bounded,
  oldest out first.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

# header.payload.signature, base64url without padding; a JOSE header always starts with `{"` = `eyJ`
_JWS = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")  # an unsigned `alg: none` has no third part
MAX_TOKEN_CHARS = 16384  # an IdP's access token is 1-4 KiB; a larger bearer is refused unread


def looks_like_jwt(credential: str) -> bool:
    return len(credential) <= MAX_TOKEN_CHARS and _JWS.fullmatch(credential) is not None


TIME_CLAIMS = ("exp", "nbf", "iat")
MAX_NUMERIC_DATE = 253_402_300_799  # 9999-12-31T23:59:59Z: any later instant is a made-up one
MAX_SUBJECT_CHARS = 255  # OpenID Connect Core 1.0, section 2: `sub` "MUST NOT exceed 255 ASCII characters"
_UNSTORABLE = frozenset({"Cc", "Cs"})  # control characters (NUL among them) and lone surrogates


def claims_fault(claims: Mapping[str, Any]) -> str | None:
    """The first claim a verified token may not be accepted with (for the log line only; the client is
    told "invalid token"), or None. Time claims, when present, are JSON numbers (RFC 7519 NumericDate:
    not a string, not a boolean), finite and within 0..year 9999, so every later use of them (the
    verified-token cache's expiry) holds a float. `sub`, when present, is at most 255 characters without a
    control character or a lone surrogate, so the ledger (PostgreSQL refuses NUL in text) and the audit log
    can always store it and the log can always hash it."""
    for name in TIME_CLAIMS:
        if name in claims and not _numeric_date(claims[name]):
            return name
    sub = claims.get("sub")
    if sub is not None and not (isinstance(sub, str) and len(sub) <= MAX_SUBJECT_CHARS
                                and not any(unicodedata.category(c) in _UNSTORABLE for c in sub)):
        return "sub"
    return None


def _numeric_date(value: Any) -> bool:
    # compared as given (float() of a 400-digit integer raises); NaN and infinities fail the comparison
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value <= MAX_NUMERIC_DATE


@dataclass(frozen=True, slots=True)
class GroupRule:
    """One `auth.jwt.groups` entry: a group's team (optional) and models (None: every model)."""

    group: str
    team: str | None
    models: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class Grant:
    team: str
    models: tuple[str, ...] | None  # None: every model
    subject: str


@dataclass(frozen=True, slots=True)
class Refusal:
    why: str  # for the log line only; the client is told "permission denied" and nothing more


def claim_groups(claims: Mapping[str, Any], groups_claim: str) -> tuple[str, ...]:
    """The token's groups: a list of strings, or one string (some IdPs send a single group bare).
    A dotted claim name reads a nested claim (`realm_access.roles`, Keycloak's roles)."""
    value: Any = claims
    for part in groups_claim.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(g for g in value if isinstance(g, str))
    return ()


def grant_for(claims: Mapping[str, Any], rules: Sequence[GroupRule], groups_claim: str,
              team_claim: str | None, known_teams: frozenset[str]) -> Grant | Refusal:
    held = set(claim_groups(claims, groups_claim))
    mapped = [r for r in rules if r.group in held]
    if not mapped:
        return Refusal("no mapped group")
    team = next((r.team for r in mapped if r.team), None)
    if team is None and team_claim:
        named = claims.get(team_claim)
        if isinstance(named, str) and named in known_teams:
            team = named
    if team is None:
        return Refusal("no team")
    models: tuple[str, ...] | None
    if any(r.models is None for r in mapped):
        models = None
    else:
        union: dict[str, None] = {}
        for r in mapped:
            union.update(dict.fromkeys(r.models or ()))
        models = tuple(union)
    sub = claims.get("sub")
    return Grant(team, models, sub if isinstance(sub, str) else "")


class RefetchGate:
    """Whether an unknown `kid` may trigger a JWKS fetch now: at most one per `interval_s`."""

    __slots__ = ("_interval", "_last")

    def __init__(self, interval_s: float = 30.0) -> None:
        self._interval = interval_s
        self._last: float | None = None

    def try_pass(self, now: float) -> bool:
        if self._last is not None and now - self._last < self._interval:
            return False
        self._last = now
        return True


V = TypeVar("V")


class TokenCache(Generic[V]):
    """Verified tokens by digest, each with the instant it stops being valid. Bounded: a full cache
    drops its oldest entry; an expired entry is dropped when it is read."""

    __slots__ = ("_entries", "_max")

    def __init__(self, max_entries: int = 10_000) -> None:
        self._entries: dict[bytes, tuple[V, float]] = {}
        self._max = max_entries

    def get(self, digest: bytes, now: float) -> V | None:
        hit = self._entries.get(digest)
        if hit is None:
            return None
        if now >= hit[1]:
            del self._entries[digest]
            return None
        return hit[0]

    def discard_where(self, stale: Callable[[V], bool]) -> None:
        """Drop every entry whose value is `stale` (the verifying key withdrawn): rare, so a whole pass."""
        for digest in [d for d, (v, _) in self._entries.items() if stale(v)]:
            del self._entries[digest]

    def put(self, digest: bytes, value: V, until: float) -> None:
        if digest not in self._entries and len(self._entries) >= self._max:
            del self._entries[next(iter(self._entries))]
        self._entries[digest] = (value, until)

    def __len__(self) -> int:
        return len(self._entries)
