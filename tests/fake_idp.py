"""A scripted OpenID Connect identity provider on 127.0.0.1, as Keycloak, Okta or Entra ID serve one:
the discovery document at `{issuer}/.well-known/openid-configuration`, a JWKS at its `jwks_uri`, and
tokens signed with keys generated for each run (RSA, P-256 and Ed25519). It rotates keys, can go down
(every request answered 503) and counts the JWKS fetches, so tests see what the gateway asked of it.

For a browser's sign-in (the admin console) it is also an authorization server: the authorization
endpoint signs the user in at once (as `login_groups`) and redirects back with a one-time code, and the
token endpoint gives a token only for that code, its client and redirect URI, and the PKCE verifier
whose S256 challenge came with it (RFC 7636); every exchange is kept in `exchanges`.
"""

from __future__ import annotations

import base64
import hashlib
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


CORS = {"Access-Control-Allow-Origin": "*"}  # a browser page reads discovery and the token endpoint


@dataclass(frozen=True)
class Exchange:
    """One call of the token endpoint: what was sent, and whether a token was given."""

    form: dict[str, str]
    granted: bool
    access_token: str | None


@dataclass
class FakeIdp:
    keys: list[SigningKey] = field(default_factory=lambda: [new_key("RS256"), new_key("ES256"), new_key("EdDSA")])
    down: bool = False
    jwks_fetches: int = 0
    discovery_fetches: int = 0
    port: int = 0
    login_groups: list[str] = field(default_factory=lambda: ["ml-eng"])
    authorizations: list[dict[str, str]] = field(default_factory=list)  # the query of each /auth
    refuse: str | None = None  # set: /auth sends the browser back with this `error` (and the state) instead of a code
    exchanges: list[Exchange] = field(default_factory=list)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _runner: web.AppRunner | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/realms/test"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/realms/test/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/realms/test/protocol/openid-connect/certs", self._jwks)
        app.router.add_get("/realms/test/protocol/openid-connect/auth", self._authorize)
        app.router.add_post("/realms/test/protocol/openid-connect/token", self._token)
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
        return web.json_response({"issuer": self.issuer, "scopes_supported": ["openid", "groups"],
                                  "jwks_uri": f"{self.issuer}/protocol/openid-connect/certs",
                                  "authorization_endpoint": f"{self.issuer}/protocol/openid-connect/auth",
                                  "token_endpoint": f"{self.issuer}/protocol/openid-connect/token"},
                                 headers=CORS)

    async def _jwks(self, request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        if self.down:
            return web.Response(status=503)
        return web.json_response({"keys": [k.public_jwk() for k in self.keys]})

    async def _authorize(self, request: web.Request) -> web.Response:
        q = dict(request.query)
        self.authorizations.append(q)
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or "code_challenge" not in q:
            return web.Response(status=400, text="PKCE S256 and response_type=code are required")
        if self.refuse is not None:  # RFC 6749 §4.1.2.1: the error, and the state it was sent
            raise web.HTTPFound(f"{q['redirect_uri']}?error={self.refuse}&state={q.get('state', '')}")
        code = uuid.uuid4().hex
        self._codes[code] = q
        target = f"{q['redirect_uri']}?code={code}&state={q.get('state', '')}"
        raise web.HTTPFound(target)

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        asked = self._codes.pop(form.get("code", ""), None)  # one use, granted or not
        verifier = form.get("code_verifier", "").encode()
        granted = (asked is not None and form.get("grant_type") == "authorization_code"
                   and form.get("client_id") == asked["client_id"] and form.get("redirect_uri") == asked["redirect_uri"]
                   and b64url(hashlib.sha256(verifier).digest()) == asked["code_challenge"])
        token = self.token(self.login_groups) if granted else None
        self.exchanges.append(Exchange(form, granted, token))
        if token is None:
            return web.json_response({"error": "invalid_grant"}, status=400, headers=CORS)
        return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": 300}, headers=CORS)
