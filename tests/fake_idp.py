"""A scripted OpenID Connect identity provider on 127.0.0.1, as Keycloak, Okta or Entra ID serve one:
the discovery document at `{issuer}/.well-known/openid-configuration`, a JWKS at its `jwks_uri`, and
tokens signed with keys generated for each run (RSA, P-256 and Ed25519). It rotates keys, can go down
(every request answered 503) and counts the JWKS fetches, so tests see what the gateway asked of it.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tests.loopback_app import serve_on_loopback

AUDIENCE = "llm-gateway"


@dataclass
class SigningKey:
    alg: str
    kid: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        pub = self.private.public_key()
        algo = {"RS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}[self.alg]
        jwk: dict[str, Any] = json.loads(algo.to_jwk(pub))
        jwk.update(kid=self.kid, use="sig", alg=self.alg)
        return jwk


def new_key(alg: str = "RS256") -> SigningKey:
    private: Any
    if alg == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = ed25519.Ed25519PrivateKey.generate()
    return SigningKey(alg, uuid.uuid4().hex[:12], private)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class FakeIdp:
    keys: list[SigningKey] = field(default_factory=lambda: [new_key("RS256"), new_key("ES256"), new_key("EdDSA")])
    down: bool = False
    jwks_fetches: int = 0
    discovery_fetches: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/realms/test"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/realms/test/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/realms/test/protocol/openid-connect/certs", self._jwks)
        self._runner, self.port = await serve_on_loopback(app)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def rotate(self, alg: str = "RS256") -> SigningKey:
        """A new signing key, published beside the others (as IdPs roll keys)."""
        key = new_key(alg)
        self.keys.append(key)
        return key

    def token(self, groups: list[str] | None = None, *, key: SigningKey | None = None, ttl_s: float = 300,
              **claims: Any) -> str:
        key = key or self.keys[0]
        now = int(time.time())
        payload: dict[str, Any] = {"iss": self.issuer, "aud": AUDIENCE, "sub": f"user-{uuid.uuid4().hex[:8]}",
                                   "iat": now, "exp": now + int(ttl_s), "groups": groups or ["ml-eng"]}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": key.kid})

    async def _discovery(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503)
        self.discovery_fetches += 1
        return web.json_response({"issuer": self.issuer,
                                  "jwks_uri": f"{self.issuer}/protocol/openid-connect/certs",
                                  "authorization_endpoint": f"{self.issuer}/protocol/openid-connect/auth",
                                  "token_endpoint": f"{self.issuer}/protocol/openid-connect/token"})

    async def _jwks(self, request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        if self.down:
            return web.Response(status=503)
        return web.json_response({"keys": [k.public_jwk() for k in self.keys]})
