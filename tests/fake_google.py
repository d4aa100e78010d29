"""Scripted Google endpoints on 127.0.0.1 that act like the real ones: the Gemini API (a request without
the right `x-goog-api-key` is answered 400 INVALID_ARGUMENT "API key not valid", as Google does),
Vertex AI (a request whose bearer token this fake did not issue, or has revoked, is answered 401
UNAUTHENTICATED), an OAuth2 token endpoint for service accounts (RFC 7523 JWT bearer grant: the
assertion's RS256 signature is verified against the service account's public key, its `iss`, `aud` and
`scope` checked) that is also the STS of workload identity federation (RFC 8693 token exchange), and
a GCE metadata server (the `Metadata-Flavor: Google` handshake, the default service account's token).
Model answers are `FakeUpstream` scripts queued per path.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests import google_scripts as g
from tests.fake_upstream import FakeUpstream, Script, json_script

SA_EMAIL = "gateway@test-project.iam.gserviceaccount.com"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
API_KEY = "AIza-test-key-SECRET"
PROJECT = "test-project"
LOCATION = "europe-west4"
FEDERATED_SUBJECT_TOKEN = "oidc-subject-token"  # what the external identity provider gave the workload


def gemini_path(model: str, stream: bool) -> str:
    return f"/v1beta/models/{model}:{'streamGenerateContent' if stream else 'generateContent'}"


def vertex_path(model: str, stream: bool, location: str = LOCATION) -> str:
    root = f"/v1/projects/{PROJECT}/locations/{location}/publishers"
    if model.startswith("claude-"):
        return f"{root}/anthropic/models/{model}:{'streamRawPredict' if stream else 'rawPredict'}"
    return f"{root}/google/models/{model}:{'streamGenerateContent' if stream else 'generateContent'}"


def sse_script(responses: list[dict[str, Any]], split: int = 0) -> Script:
    return Script([g.sse(responses)], split=split)


def _b64url(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


class FakeGoogle(FakeUpstream):
    def __init__(self, expires_in: int = 3600) -> None:
        super().__init__()
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.expires_in = expires_in
        self.issued: list[str] = []  # tokens handed out, in order
        self.revoked: set[str] = set()
        self.token_requests = 0
        self.refuse_tokens = False  # the token endpoint answers 503 (an outage at start)
        self.token_asked = asyncio.Event()  # set by every token request
        self.hold_tokens: asyncio.Event | None = None  # when set: token requests wait for it (a slow IdP)
        self._serial = itertools.count(1)

    # --- credentials ---

    def service_account_file(self, directory: Path) -> Path:
        pem = self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode()
        info = {"type": "service_account", "project_id": PROJECT, "private_key_id": "k1", "private_key": pem,
                "client_email": SA_EMAIL, "client_id": "1", "token_uri": f"{self.base_url}/token"}
        path = directory / "sa.json"
        path.write_text(json.dumps(info))
        return path

    def federation_file(self, directory: Path, quota_project: str) -> Path:
        """A workload identity federation (`external_account`) file: a subject token read from a file,
        traded at this fake's STS endpoint (RFC 8693 token exchange)."""
        subject = directory / "subject-token"
        subject.write_text(FEDERATED_SUBJECT_TOKEN)
        audience = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/oidc"
        info = {"type": "external_account", "audience": audience,
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_url": f"{self.base_url}/token", "credential_source": {"file": str(subject)},
                "quota_project_id": quota_project}
        path = directory / "federation.json"
        path.write_text(json.dumps(info))
        return path

    def _issue(self) -> web.Response:
        token = f"ya29.fake-{next(self._serial)}"
        self.issued.append(token)
        return web.json_response({"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"},
                                 headers={"Metadata-Flavor": "Google"})

    def _verify_assertion(self, assertion: str) -> bool:
        try:
            head, payload, sig = assertion.split(".")
            self.key.public_key().verify(_b64url(sig), f"{head}.{payload}".encode(), padding.PKCS1v15(),
                                         hashes.SHA256())
            claims = orjson.loads(_b64url(payload))
        except (ValueError, InvalidSignature, orjson.JSONDecodeError):
            return False
        # google-auth names Google's own token URL as the audience whatever the file's token_uri
        audiences = ("https://oauth2.googleapis.com/token", f"{self.base_url}/token")
        return (claims.get("iss") == SA_EMAIL and claims.get("aud") in audiences
                and SCOPE in str(claims.get("scope", "")).split() and claims.get("exp", 0) > time.time())

    async def _token(self, request: web.Request) -> web.Response:
        self.token_requests += 1
        self.token_asked.set()
        if self.hold_tokens is not None:
            await self.hold_tokens.wait()
        if self.refuse_tokens:
            return web.json_response({"error": "temporarily_unavailable"}, status=503)
        form = {k: v[0] for k, v in urllib.parse.parse_qs((await request.read()).decode()).items()}
        grant = form.get("grant_type")
        if grant == "urn:ietf:params:oauth:grant-type:token-exchange":  # STS: workload identity federation
            if form.get("subject_token") != FEDERATED_SUBJECT_TOKEN or SCOPE not in form.get("scope", ""):
                return web.json_response({"error": "invalid_grant"}, status=400)
            return self._issue()
        if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer" or not self._verify_assertion(
                form.get("assertion", "")):
            return web.json_response({"error": "invalid_grant", "error_description": "Invalid JWT"}, status=400)
        return self._issue()

    async def _metadata(self, request: web.Request) -> web.StreamResponse:
        flavor = {"Metadata-Flavor": "Google"}
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        path = request.path
        if path == "/":
            return web.Response(text="computeMetadata/\n", headers=flavor)
        if path.endswith("/service-accounts/default/token"):
            self.token_requests += 1
            self.token_asked.set()
            if self.hold_tokens is not None:
                await self.hold_tokens.wait()
            return self._issue()
        if path.endswith("/service-accounts/default/"):
            return web.json_response({"email": SA_EMAIL, "scopes": [SCOPE], "aliases": ["default"]}, headers=flavor)
        if path.endswith("/project/project-id"):
            return web.Response(text=PROJECT, headers=flavor)
        if path.endswith("/universe/universe-domain"):
            return web.Response(text="googleapis.com", headers=flavor)
        return web.Response(status=404, text="not found", headers=flavor)

    # --- the model endpoints ---

    def _authorized(self, request: web.Request) -> web.Response | None:
        if request.path.startswith("/v1beta/"):
            if request.headers.get("x-goog-api-key") == API_KEY:
                return None
            err = g.error("INVALID_ARGUMENT", 400, "API key not valid. Please pass a valid API key.",
                          reason="API_KEY_INVALID")
            return web.json_response(err, status=400)
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ")
        if auth.startswith("Bearer ") and token in self.issued and token not in self.revoked:
            return None
        err = g.error("UNAUTHENTICATED", 401, "Request had invalid authentication credentials.")
        return web.json_response(err, status=401)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/token":
            return await self._token(request)
        if request.path == "/" or request.path.startswith("/computeMetadata/"):
            return await self._metadata(request)
        refused = self._authorized(request)
        if refused is not None:
            return refused
        return await super()._handle(request)


def gemini_body(text: str, u: dict[str, int] | None = None) -> Script:
    return json_script(g.response([g.text(text)], "STOP", u or g.usage()))
