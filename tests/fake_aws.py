"""Scripted AWS endpoints on 127.0.0.1 that behave like the real ones where the gateway can tell:

- `FakeBedrock`: Bedrock Runtime. Every request's SigV4 signature is VERIFIED: recomputed with botocore
  from the canonical request (method, raw path, query, the headers named in `SignedHeaders`, the body)
  and the secret of the access key it names; a bad or missing one is answered 403
  `InvalidSignatureException` / `UnrecognizedClientException` as AWS does. Otherwise it plays the
  queued `Script` (tests/fake_upstream.py) for the path: event-stream frames (tests/eventstream_frames.py)
  or JSON bodies.
- `FakeSts`: STS `AssumeRoleWithWebIdentity` (checks the token file's token) and `AssumeRole` (checks
  its own SigV4 signature, service `sts`), answering XML credentials that rotate on every call.
- `FakeContainerCredentials`: the ECS/EKS container credentials endpoint (`AWS_CONTAINER_CREDENTIALS_FULL_URI`),
  checking the authorization token, rotating credentials on every call.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.fake_upstream import FakeUpstream
from tests.loopback_app import serve_on_loopback

EVENTSTREAM = {"Content-Type": "application/vnd.amazon.eventstream"}
_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$")


@dataclass(frozen=True)
class KeyPair:
    secret: str
    token: str | None = None


def verify_sigv4(method: str, raw_path: str, headers: dict[str, str], body: bytes,
                 keys: dict[str, KeyPair], service: str, region: str) -> tuple[str, str] | None:
    """None when the request is signed by a known key; else (AWS error type, message)."""
    lower = {k.lower(): v for k, v in headers.items()}
    m = _AUTH.match(lower.get("authorization", ""))
    if m is None:
        return "MissingAuthenticationTokenException", "Missing Authentication Token"
    key_id, day, sregion, sservice, signed, signature = m.groups()
    pair = keys.get(key_id)
    if pair is None:
        return "UnrecognizedClientException", "The security token included in the request is invalid."
    if (sregion, sservice) != (region, service) or not lower.get("x-amz-date", "").startswith(day):
        return "InvalidSignatureException", "Credential should be scoped to a valid region and service."
    if pair.token is not None and lower.get("x-amz-security-token") != pair.token:
        return "UnrecognizedClientException", "The security token included in the request is invalid."
    names = signed.split(";")
    if "host" not in names or any(n not in lower for n in names):
        return "InvalidSignatureException", "SignedHeaders must include host and name sent headers."
    req = AWSRequest(method=method, url=f"http://{lower['host']}{raw_path}", data=body,
                     headers={n: lower[n] for n in names})
    req.context["timestamp"] = lower["x-amz-date"]
    auth = SigV4Auth(Credentials(key_id, pair.secret, pair.token), service, region)
    want = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    if want != signature:
        return "InvalidSignatureException", ("The request signature we calculated does not match the "
                                             "signature you provided.")
    return None


class FakeBedrock(FakeUpstream):
    def __init__(self, keys: dict[str, KeyPair], region: str = "us-east-1") -> None:
        super().__init__()
        self.keys = keys
        self.region = region
        self.key_ids: list[str] = []  # the access key id of every verified request, in order
        self.rejected: list[str] = []  # the error type of every refused request

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        bad = verify_sigv4(request.method, request.raw_path, dict(request.headers), body, self.keys,
                           "bedrock", self.region)
        if bad is not None:
            self.rejected.append(bad[0])
            return web.json_response({"message": bad[1]}, status=403, headers={"x-amzn-ErrorType": f"{bad[0]}:"})
        self.key_ids.append(_AUTH.match(request.headers["authorization"]).group(1))  # type: ignore[union-attr]
        return await super()._handle(request)


def _expiry(seconds: float) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Issuer:
    """Credentials that change on every call: `AKIA<prefix>0001`, `...0002`, ..."""

    prefix: str
    lifetime_s: float = 3600.0
    issued: dict[str, KeyPair] = field(default_factory=dict)
    _n: itertools.count = field(default_factory=lambda: itertools.count(1))  # type: ignore[type-arg]

    def issue(self) -> tuple[str, KeyPair]:
        key_id = f"ASIA{self.prefix}{next(self._n):04d}"
        pair = KeyPair(hashlib.sha256(key_id.encode()).hexdigest()[:40], f"token-{key_id}")
        self.issued[key_id] = pair
        return key_id, pair


class _Server:
    def __init__(self) -> None:
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.calls: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner, self.port = await serve_on_loopback(app)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError


class FakeSts(_Server):
    def __init__(self, web_identity_token: str = "", source_keys: dict[str, KeyPair] | None = None,
                 region: str = "us-east-1", lifetime_s: float = 3600.0) -> None:
        super().__init__()
        self.token = web_identity_token
        self.source_keys = source_keys or {}
        self.region = region
        self.issuer = _Issuer("STS", lifetime_s)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        form = dict(await request.post()) if request.method == "POST" else dict(request.query)
        action = str(form.get("Action", ""))
        self.calls.append(action)
        if action == "AssumeRoleWithWebIdentity":
            if not self.token or form.get("WebIdentityToken") != self.token:
                return _sts_error("InvalidIdentityToken", "bad token")
        elif action == "AssumeRole":
            bad = verify_sigv4(request.method, request.raw_path, dict(request.headers), body, self.source_keys,
                               "sts", self.region)
            if bad is not None:
                return _sts_error(bad[0], bad[1], 403)
        else:
            return _sts_error("InvalidAction", "unknown action")
        key_id, pair = self.issuer.issue()
        return web.Response(text=_sts_xml(action, key_id, pair, _expiry(self.issuer.lifetime_s)),
                            content_type="text/xml")


def _sts_xml(action: str, key_id: str, pair: KeyPair, expiration: str) -> str:
    return (f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><{action}Result>'
            f"<Credentials><AccessKeyId>{key_id}</AccessKeyId><SecretAccessKey>{pair.secret}</SecretAccessKey>"
            f"<SessionToken>{pair.token}</SessionToken><Expiration>{expiration}</Expiration></Credentials>"
            "<AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/s</Arn>"
            "<AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>"
            f"</{action}Result><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></{action}Response>")


def _sts_error(code: str, message: str, status: int = 400) -> web.Response:
    xml = (f'<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
           f"<Code>{code}</Code><Message>{message}</Message></Error><RequestId>1</RequestId></ErrorResponse>")
    return web.Response(text=xml, status=status, content_type="text/xml")


class FakeContainerCredentials(_Server):
    def __init__(self, auth_token: str = "container-token", lifetime_s: float = 3600.0) -> None:
        super().__init__()
        self.auth_token = auth_token
        self.issuer = _Issuer("CTR", lifetime_s)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.calls.append(request.path)
        if request.headers.get("Authorization") != self.auth_token:
            return web.json_response({"message": "unauthorized"}, status=401)
        key_id, pair = self.issuer.issue()
        return web.json_response({"AccessKeyId": key_id, "SecretAccessKey": pair.secret, "Token": pair.token,
                                  "Expiration": _expiry(self.issuer.lifetime_s)})


def all_keys(*sources: Any) -> dict[str, KeyPair]:
    """Every key pair the scripted credential sources issued so far (what a FakeBedrock accepts)."""
    out: dict[str, KeyPair] = {}
    for src in sources:
        out.update(src.issuer.issued if hasattr(src, "issuer") else src)
    return out
