"""IdP tokens as bearer credentials on the data plane (docs/identity.md).

A token is accepted only when PyJWT verifies its signature with a key of the issuer's JWKS chosen by
`kid`, with an asymmetric algorithm that fits the key's type (`none`, HMAC and a key/algorithm mismatch
are refused, so no algorithm confusion), and `iss`, `aud`, `exp` and `nbf` hold within the leeway; its
time claims and subject must also be values the gateway can use and store (`claims_fault`). Its
groups then grant a team and models (`core.policy.identity.grant_for`).

The cost stays off the request path: a verified token is kept (by digest) until it expires, or until a
JWKS fetch no longer holds the key that verified it, so each token is verified once; the JWKS is fetched
at start and again only for an unknown `kid`, at most once per `refetch_s` (a token with an unknown `kid`
waits for the fetch in flight), while the cached keys keep working through an IdP outage.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import jwt
import structlog

from gateway.config.types import ApiKey, JwtConfig, TeamLimits
from gateway.core.policy.identity import (
    GroupRule,
    RefetchGate,
    Refusal,
    TokenCache,
    claim_groups,
    claims_fault,
    grant_for,
)
from gateway.errors import ExpiredApiKey, InvalidApiKey, PermissionDenied

log = structlog.get_logger("gateway")

# the algorithms each JWK key type may verify; a symmetric (`oct`) key verifies nothing
_FAMILY = {
    "RSA": frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
    "EC": frozenset({"ES256", "ES384", "ES512"}),
    "OKP": frozenset({"EdDSA"}),
}
_EC_CURVE = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
MAX_KEYS = 64  # keys of one JWKS kept; an IdP publishes two or three
_INVALID_TOKEN = {"WWW-Authenticate": 'Bearer error="invalid_token"'}

FetchJson = Callable[[str, float, str], Awaitable[Any]]
T = TypeVar("T")


class TeamSource(Protocol):
    """The store's teams as this replica caches them (`gateway.store.KeyCache`)."""

    @property
    def version(self) -> int: ...

    @property
    def team_limits(self) -> Mapping[str, TeamLimits]: ...


@dataclass(frozen=True, slots=True)
class _Verified:
    """A verified token's principal, with what it depends on: the store's teams version it was built at,
    and the JWKS key that verified it (`kid` and the key as fetched)."""

    key: ApiKey
    version: int
    kid: str
    jwk: dict[str, Any]


class SigningKeyUnknown(Exception):
    """A token names a `kid` the cached JWKS does not hold: worth one refetch (`JwtAuth.refetch`)."""


def invalid_token() -> InvalidApiKey:
    return InvalidApiKey("invalid token", headers=dict(_INVALID_TOKEN))


class Jwks:
    """The issuer's signing keys by `kid`, fetched through the gateway's own outbound client."""

    def __init__(self, cfg: JwtConfig, fetch: FetchJson) -> None:
        self._cfg, self._fetch = cfg, fetch
        self._jwks_url = cfg.jwks_url
        self.keys: dict[str, dict[str, Any]] = {}
        self._inflight: asyncio.Future[None] | None = None
        self.fetches = 0  # how many times the JWKS was asked for (tests, the log line)

    async def refresh(self, timeout_s: float) -> None:
        """Fetch the JWKS (one fetch at a time: concurrent callers share it). A failure keeps the keys.
        `timeout_s`: the caller's config's (a reload that keeps the IdP keeps this object, not its cfg)."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._fetch_keys(timeout_s))
        await asyncio.shield(self._inflight)  # a caller that goes away leaves the fetch to the others

    async def settled(self) -> bool:
        """The end of the fetch in flight, if one is (bounded by `timeout_s`, as the fetch is): whether
        there was one. Shielded: a waiter cancelled (its client gone) does not cancel the shared fetch."""
        inflight = self._inflight
        if inflight is None or inflight.done():  # done: its keys (or its failure) are already in place
            return False
        await asyncio.shield(inflight)
        return True

    async def _fetch_keys(self, timeout_s: float) -> None:
        self.fetches += 1
        try:
            url = self._jwks_url or await self._discover(timeout_s)
            doc = await self._fetch(url, timeout_s, "jwks")
        except Exception as exc:  # an IdP outage must never fail a request that a cached key verifies
            log.warning("jwks_fetch_failed", issuer=self._cfg.issuer, error=type(exc).__name__)
            return
        keys = _usable_keys(doc)
        if keys:
            if keys != self.keys:  # a periodic refresh that brings the same keys says nothing
                log.info("jwks_loaded", issuer=self._cfg.issuer, keys=len(keys))
            self.keys = keys
        else:
            log.warning("jwks_fetch_failed", issuer=self._cfg.issuer, error="no usable signing key")

    async def _discover(self, timeout_s: float) -> str:
        base = self._cfg.issuer.rstrip("/")
        doc = await self._fetch(f"{base}/.well-known/openid-configuration", timeout_s, "oidc discovery")
        url = doc.get("jwks_uri") if isinstance(doc, dict) else None
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise ValueError("the discovery document has no jwks_uri")
        self._jwks_url = url
        return url


def _usable_keys(doc: Any) -> dict[str, dict[str, Any]]:
    raw = doc.get("keys") if isinstance(doc, dict) else None
    out: dict[str, dict[str, Any]] = {}
    for k in raw if isinstance(raw, list) else ():
        if not isinstance(k, dict) or k.get("kty") not in _FAMILY or k.get("use", "sig") != "sig":
            continue
        kid = k.get("kid")
        out[kid if isinstance(kid, str) else ""] = k
        if len(out) >= MAX_KEYS:
            break
    return out


class JwtAuth:
    """Verifies tokens and maps them to the principal the pipeline counts (an `ApiKey` named `jwt:<team>`)."""

    def __init__(self, cfg: JwtConfig, jwks: Jwks, teams: TeamSource | None = None,
                 clock: Callable[[], float] = time.time, gate: RefetchGate | None = None) -> None:
        self.cfg, self.jwks, self._teams, self._clock = cfg, jwks, teams, clock
        self._rules = tuple(GroupRule(g.group, g.team, g.models) for g in cfg.groups)
        self._config_teams = frozenset(g.team for g in cfg.groups if g.team)
        self._verified: TokenCache[_Verified] = TokenCache()
        self._prepared: dict[tuple[str, str], jwt.PyJWK] = {}
        self._keys_seen = jwks.keys  # the keys `_prepared` and `_verified` were built from
        # `gate`: the one of the config this reload replaces, when it had the same IdP and `refetch_s`; a new
        # one would let a made-up `kid` cause a JWKS fetch right after every SIGHUP (docs/identity.md)
        self.gate = gate if gate is not None else RefetchGate(cfg.refetch_s)

    def cached(self, digest: bytes) -> ApiKey | None:
        """The principal of a token already verified (by its SHA-256), while it is valid and the store's
        teams are unchanged; else None."""
        self._follow_keys()
        hit = self._verified.get(digest, self._clock())
        if hit is None or hit.version != (self._teams.version if self._teams is not None else 0):
            return None
        return hit.key

    def principal(self, token: str, digest: bytes | None = None) -> ApiKey:
        """The caller a token names (`digest`: its SHA-256, when the caller has it). Raises InvalidApiKey,
        ExpiredApiKey, PermissionDenied, or SigningKeyUnknown (then `refetch` and ask again)."""
        now = self._clock()
        digest = digest or hashlib.sha256(token.encode()).digest()
        version = self._teams.version if self._teams is not None else 0
        self._follow_keys()
        hit = self._verified.get(digest, now)
        if hit is not None and hit.version == version:  # a store change of team limits rebuilds the principal
            return hit.key
        claims, kid = self._verify(token)
        key = self._grant(claims)
        exp = claims.get("exp")
        until = float(exp) + self.cfg.leeway_s if isinstance(exp, int | float) else now + 300.0
        self._verified.put(digest, _Verified(key, version, kid, self._keys_seen[kid]), until)
        return key

    def claims(self, token: str) -> dict[str, Any]:
        """A token's verified claims, for the control plane (admin roles by `admin.jwt_groups`): the same
        checks as `principal`, without the data plane's group mapping. Raises as `principal` does."""
        return self._verify(token)[0]

    def groups(self, claims: dict[str, Any]) -> tuple[str, ...]:
        return claim_groups(claims, self.cfg.groups_claim)

    async def refetch(self) -> bool:
        """Fresh keys for an unknown `kid`: one JWKS fetch, unless one ran within `refetch_s`; then the end
        of the fetch still in flight, if one is, since that fetch may bring the key a token was signed
        with (an IdP rotating under load: docs/identity.md). Whether keys were fetched for the caller."""
        if self.gate.try_pass(time.monotonic()):
            await self.jwks.refresh(self.cfg.timeout_s)
            return True
        return await self.jwks.settled()  # the gate closed: the fetch in flight, or none (then refused at once)

    async def after_refetch(self, again: Callable[[], T]) -> T:
        """`again()` (what raised SigningKeyUnknown) after `refetch`: a `kid` still unknown is an invalid
        token. The data plane (`KeyRing.after_refetch`) and the control plane (`admin_auth`) share it."""
        await self.refetch()
        try:
            return again()
        except SigningKeyUnknown:
            raise invalid_token() from None

    def _follow_keys(self) -> dict[str, dict[str, Any]]:
        """The JWKS's keys. When a fetch has replaced them (whoever awaited it), what was prepared or
        verified with a key they no longer hold, or hold changed, is forgotten: a token verified with a
        withdrawn key ends with it, not when it expires."""
        keys = self.jwks.keys
        if keys is not self._keys_seen:
            self._keys_seen, self._prepared = keys, {}
            self._verified.discard_where(lambda v: keys.get(v.kid) != v.jwk)
        return keys

    def _verify(self, token: str) -> tuple[dict[str, Any], str]:
        """The claims of a token that passes every check, and the `kid` of the key that verified it."""
        try:
            header = jwt.get_unverified_header(token)
        except Exception:
            raise invalid_token() from None
        kid, key = self._key(header)
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[key.algorithm_name], audience=self.cfg.audience, issuer=self.cfg.issuer,
                leeway=self.cfg.leeway_s, options={"require": ["exp", "iss", "aud"]})
        except jwt.ExpiredSignatureError:
            raise ExpiredApiKey("expired token", headers=dict(_INVALID_TOKEN)) from None
        except Exception:  # every other refusal, and whatever a hostile token makes a parser raise
            raise invalid_token() from None
        if (fault := claims_fault(claims)) is not None:  # signed by the IdP, and still unusable
            refused = invalid_token()
            refused.reason = f"jwt_bad_{fault}"  # the log line names the claim; the client hears "invalid"
            raise refused
        return claims, kid

    def _key(self, header: dict[str, Any]) -> tuple[str, jwt.PyJWK]:
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or not any(alg in f for f in _FAMILY.values()):
            raise invalid_token()  # `none`, HS256 and anything we would not verify: refused unread
        keys = self._follow_keys()
        if kid is None and len(keys) == 1:
            kid = next(iter(keys))
        if not isinstance(kid, str) or kid not in keys:
            raise SigningKeyUnknown()
        prepared = self._prepared.get((kid, alg))
        if prepared is None:
            jwk = keys[kid]
            fits = alg in _FAMILY[jwk["kty"]] and jwk.get("alg", alg) == alg and (
                jwk["kty"] != "EC" or jwk.get("crv") == _EC_CURVE.get(alg))
            if not fits:
                raise invalid_token()
            try:
                prepared = jwt.PyJWK(jwk, algorithm=alg)
            except Exception:
                raise invalid_token() from None
            self._prepared[(kid, alg)] = prepared
        return kid, prepared

    def _grant(self, claims: dict[str, Any]) -> ApiKey:
        stored = self._teams.team_limits if self._teams is not None else {}
        g = grant_for(claims, self._rules, self.cfg.groups_claim, self.cfg.team_claim,
                      self._config_teams | frozenset(stored))
        if isinstance(g, Refusal):
            denied = PermissionDenied("this token's groups grant no access to the gateway")
            denied.reason = f"jwt_{g.why.replace(' ', '_')}"
            raise denied
        team = stored.get(g.team) or TeamLimits(name=g.team)
        return ApiKey(name=f"jwt:{g.team}", models=g.models, team=team, subject=g.subject or None)


# how often a gateway without `auth.jwt` looks again whether a reload has turned it on
JWT_OFF_CHECK_S = 30.0


async def keep_keys_fresh(current: Callable[[], JwtAuth | None]) -> None:
    """The JWKS fetched again every `auth.jwt.refresh_s` (docs/identity.md): a key the IdP withdraws (rotated
    out, compromised) stops verifying tokens, those already verified and kept included (`_follow_keys`),
    without waiting for a token with an unknown `kid` or a restart. A failed fetch keeps the cached keys.
    `current`: the verifier of the config in force, read at each turn, so a reload is followed."""
    while True:
        jwt_auth = current()
        await asyncio.sleep(jwt_auth.cfg.refresh_s if jwt_auth is not None else JWT_OFF_CHECK_S)
        jwt_auth = current()
        if jwt_auth is not None:
            await jwt_auth.jwks.refresh(jwt_auth.cfg.timeout_s)
