"""Gateway keys: `Authorization: Bearer <key>` or `api-key: <key>` (docs/reference.md, "Config keys" `auth`); on the
Messages API also `x-api-key: <key>`, where the Anthropic SDKs and Claude Code put it (docs/reference.md, "Routes").

Keys are looked up by their SHA-256 digest, so plain and `key_sha256` keys are the same case, the
lookup time does not depend on how much of a key matched, and the key itself is never kept in a log
context. The key's *name* is what logs and metric labels see.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Protocol

from gateway.config.types import ApiKey, AuthConfig
from gateway.core.policy.identity import looks_like_jwt
from gateway.errors import ExpiredApiKey, InvalidApiKey, ModelNotAllowed
from gateway.pipeline.jwt_auth import JwtAuth, SigningKeyUnknown

__all__ = ["KeyRing", "KeySource", "SigningKeyUnknown"]


class KeySource(Protocol):
    """More keys beside the config's: the store's, cached in this replica (`gateway.store.KeyCache`)."""

    def find(self, digest: bytes) -> ApiKey | None: ...

    def expired(self, digest: bytes) -> bool:
        """The secret names a key past its `expires_at` (then `find` gives None)."""
        ...


class KeyRing:
    def __init__(self, auth: AuthConfig, stored: KeySource | None = None, jwt: JwtAuth | None = None):
        self._stored = stored
        self.jwt = jwt  # IdP tokens beside keys (`auth.jwt`, docs/identity.md)
        self._open = auth.allow_unauthenticated and not auth.keys and stored is None and jwt is None
        self._by_digest: dict[bytes, ApiKey] = {}
        for k in auth.keys:
            digest = bytes.fromhex(k.key_sha256) if k.key_sha256 else _digest(k.key or "")
            self._by_digest[digest] = k
        self._allow_anonymous = auth.allow_unauthenticated

    def authenticate(self, headers: Mapping[str, str], *, x_api_key: bool = False) -> ApiKey | None:
        """The caller's key, or None when unauthenticated access is allowed. Raises InvalidApiKey.
        `x_api_key`: the `x-api-key` header carries it too (the Messages API)."""
        presented = _presented_key(headers)
        if presented is None and x_api_key:
            given = headers.get("x-api-key", "").strip()
            presented = given or None
        if presented is None:
            if self._allow_anonymous:
                return None
            raise InvalidApiKey("missing gateway key: send Authorization: Bearer <key>")
        if self._open:
            return None
        digest = _digest(presented)
        for known, key in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return key
        stored = self._stored.find(digest) if self._stored is not None else None
        if stored is not None:
            return stored
        if self._stored is not None and self._stored.expired(digest):
            raise ExpiredApiKey("the gateway key has expired")
        jwt = self.jwt
        if jwt is not None:
            seen = jwt.cached(digest)  # a token seen before: no shape check, no second hash
            if seen is not None:
                return seen
            if looks_like_jwt(presented):
                return jwt.principal(presented, digest)  # raises SigningKeyUnknown: `after_refetch` then
        if self._allow_anonymous:
            return None
        raise InvalidApiKey("invalid gateway key")

    async def caller(self, headers: Mapping[str, str], *, x_api_key: bool = False) -> ApiKey | None:
        """`authenticate`, with the one JWKS refetch an unknown signing key may earn."""
        try:
            return self.authenticate(headers, x_api_key=x_api_key)
        except SigningKeyUnknown:
            return await self.after_refetch(headers, x_api_key=x_api_key)

    async def after_refetch(self, headers: Mapping[str, str], *, x_api_key: bool = False) -> ApiKey | None:
        """`authenticate` again after a token named a signing key the cached JWKS lacks: one refetch
        (at most one per `auth.jwt.refetch_s`) or the one in flight, then a `kid` still unknown is an
        invalid token (`JwtAuth.after_refetch`)."""
        assert self.jwt is not None
        return await self.jwt.after_refetch(lambda: self.authenticate(headers, x_api_key=x_api_key))

    @staticmethod
    def authorize(key: ApiKey | None, model: str, requested: str) -> None:
        """`model`: the configured model `requested` (the name as sent) resolved to. Refused as the
        404 of an unknown name, so a key cannot probe which models exist (docs/reference.md, "Routes")."""
        if key is not None and key.models is not None and model not in key.models:
            raise ModelNotAllowed.named(requested)

    @staticmethod
    def visible(key: ApiKey | None, models: list[str]) -> list[str]:
        if key is None or key.models is None:
            return models
        return [m for m in models if m in key.models]


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _presented_key(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("Authorization") or headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    api_key = headers.get("api-key")
    return api_key.strip() if api_key and api_key.strip() else None
