"""IdP tokens on the data plane (docs/identity.md), against a scripted OIDC provider on loopback that serves
discovery and a JWKS with keys generated for this run, and the official SDKs passing the token as their
API key. Every refusal is checked to reach no upstream."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import anthropic
import jwt
import openai
import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from gateway.config import parse_config
from gateway.config.types import Config
from gateway.errors import GatewayError
from tests.chat_scripts import completion, text_stream
from tests.fake_idp import AUDIENCE, FakeIdp, b64url, new_key
from tests.fake_upstream import FakeUpstream, json_script
from tests.harness import GatewayServer, LoopThread

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


def jwt_config(upstream: FakeUpstream, idp: FakeIdp, **jwt_extra: Any) -> Config:
    return parse_config({
        "auth": {"keys": [{"name": "static", "key": "sk-static-key"}],
                 "jwt": {"issuer": idp.issuer, "audience": AUDIENCE, "team_claim": "team",
                         "groups": {"ml-eng": {"team": "ml", "models": ["m*"]},
                                    "ops": {"team": "ops", "models": ["other"]},
                                    "readers": {"models": ["other"]}},
                         **jwt_extra}},
        "providers": {"up": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-up"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}]},
                   {"name": "m2", "deployments": [{"provider": "up", "model": "x2"}]},
                   {"name": "other", "deployments": [{"provider": "up", "model": "y"}]}],
    }, env={})


@pytest.fixture
def gw(idp: FakeIdp, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(jwt_config(upstream, idp))


def post(gw: GatewayServer, path: str, token: str, body: dict[str, Any],
         header: str = "Authorization") -> tuple[int, dict[str, Any], dict[str, str]]:
    value = f"Bearer {token}" if header == "Authorization" else token
    req = urllib.request.Request(f"http://127.0.0.1:{gw.port}{path}", data=json.dumps(body).encode(),
                                 headers={header: value, "content-type": "application/json",
                                          "anthropic-version": "2023-06-01"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


def test_tokens_of_each_algorithm_work_with_both_sdks(gw: GatewayServer, idp: FakeIdp,
                                                      upstream: FakeUpstream) -> None:
    for key in idp.keys:  # RS256, ES256, EdDSA
        token = idp.token(["ml-eng"], key=key)
        upstream.enqueue(CHAT, completion("hello"))
        client = openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)
        out = client.chat.completions.create(model="m", messages=HI)  # type: ignore[arg-type]
        assert out.choices[0].message.content == "hello", key.alg
        upstream.enqueue(CHAT, text_stream(["a", "b"]))
        msg = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key=token, max_retries=0)
        with msg.messages.stream(model="m2", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
            assert s.get_final_text() == "ab", key.alg
        models = [m.id for m in client.models.list()]
        assert models == ["m", "m2"], key.alg
    for r in upstream.received:  # the client's token is never forwarded
        assert all(token_part not in json.dumps(r.headers) for token_part in ("eyJ",)), r.headers
        assert r.headers.get("Authorization") == "Bearer sk-up"


def test_every_data_plane_route_takes_a_token(gw: GatewayServer, idp: FakeIdp, upstream: FakeUpstream) -> None:
    token = idp.token(["ml-eng"])
    upstream.enqueue("/v1/responses", json_script({"id": "resp_1", "object": "response", "status": "completed",
                                                   "model": "x", "output": [], "usage": {
                                                       "input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}))
    assert post(gw, "/v1/responses", token, {"model": "m", "input": "hi"})[0] == 200
    upstream.enqueue("/v1/embeddings", json_script({"object": "list", "model": "x", "data": [
        {"object": "embedding", "index": 0, "embedding": [0.1]}], "usage": {"prompt_tokens": 1, "total_tokens": 1}}))
    assert post(gw, "/v1/embeddings", token, {"model": "m", "input": "hi"})[0] == 200
    status, body, _ = post(gw, "/v1/messages/count_tokens", token, {"model": "m", "messages": HI}, "x-api-key")
    assert status == 200 and body["input_tokens"] > 0
    # the same token is refused a model its groups do not grant, as an unknown name
    assert post(gw, CHAT, token, {"model": "other", "messages": HI})[0] == 404


def test_a_static_key_still_works_beside_tokens(gw: GatewayServer, upstream: FakeUpstream) -> None:
    upstream.enqueue(CHAT, completion("ok"))
    assert post(gw, CHAT, "sk-static-key", {"model": "other", "messages": HI})[0] == 200


def _forged(idp: FakeIdp, case: str) -> str:
    good = idp.token(["ml-eng"])
    head, payload, sig = good.split(".")
    if case == "expired":
        return idp.token(["ml-eng"], ttl_s=-120)
    if case == "not_yet_valid":
        return idp.token(["ml-eng"], nbf=int(time.time()) + 600)
    if case == "wrong_iss":
        return idp.token(["ml-eng"], iss="http://127.0.0.1:1/realms/evil")
    if case == "wrong_aud":
        return idp.token(["ml-eng"], aud="someone-else")
    if case == "alg_none":
        claims = jwt.decode(good, options={"verify_signature": False})
        none_head = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        return f"{none_head}.{b64url(json.dumps(claims).encode())}."
    if case == "hs256_with_public_key":  # algorithm confusion: the public key as an HMAC secret
        pem = idp.keys[0].private.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo)
        claims = jwt.decode(good, options={"verify_signature": False})
        return _hmac_token(claims, pem, idp.keys[0].kid)
    if case == "unknown_kid":
        return idp.token(["ml-eng"], key=new_key("RS256"))
    if case == "tampered":
        claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
        claims["groups"] = ["ops"]
        return f"{head}.{b64url(json.dumps(claims).encode())}.{sig}"
    raise AssertionError(case)


def _hmac_token(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    import hmac
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64url(json.dumps(claims).encode())
    sig = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(sig)}"


@pytest.mark.parametrize("case", ["expired", "not_yet_valid", "wrong_iss", "wrong_aud", "alg_none",
                                  "hs256_with_public_key", "unknown_kid", "tampered"])
def test_bad_tokens_get_401_in_each_api_shape_and_reach_no_upstream(gw: GatewayServer, idp: FakeIdp,
                                                                    upstream: FakeUpstream, case: str) -> None:
    token = _forged(idp, case)
    code = "expired_api_key" if case == "expired" else "invalid_api_key"
    status, body, headers = post(gw, CHAT, token, {"model": "m", "messages": HI})
    assert (status, body["error"]["code"]) == (401, code)
    assert headers.get("WWW-Authenticate") == 'Bearer error="invalid_token"'
    status, body, _ = post(gw, "/v1/messages", token, {"model": "m", "max_tokens": 5, "messages": HI}, "x-api-key")
    assert status == 401 and body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert upstream.received == []


def test_a_token_whose_groups_map_to_nothing_gets_403(gw: GatewayServer, idp: FakeIdp,
                                                      upstream: FakeUpstream) -> None:
    status, body, _ = post(gw, CHAT, idp.token(["strangers"]), {"model": "m", "messages": HI})
    assert (status, body["error"]["code"]) == (403, "permission_denied")
    # a mapped group without a team, and no team claim naming a known team: no team to count against
    status, body, _ = post(gw, CHAT, idp.token(["readers"]), {"model": "other", "messages": HI})
    assert (status, body["error"]["code"]) == (403, "permission_denied")
    upstream.enqueue(CHAT, completion("ok"))
    status, _, _ = post(gw, CHAT, idp.token(["readers"], team="ops"), {"model": "other", "messages": HI})
    assert status == 200
    assert len(upstream.received) == 1


def test_groups_union_and_metric_label(gw: GatewayServer, idp: FakeIdp, upstream: FakeUpstream) -> None:
    token = idp.token(["ops", "ml-eng"])  # both: every model of both; the team is the first mapped in config order
    for model in ("m", "other"):
        upstream.enqueue(CHAT, completion("ok"))
        assert post(gw, CHAT, token, {"model": model, "messages": HI})[0] == 200
    assert gw.sample("llm_gateway_requests_total", key="jwt:ml") == 2


def test_key_rotation_and_an_idp_outage(gw: GatewayServer, idp: FakeIdp, upstream: FakeUpstream) -> None:
    upstream.defaults[CHAT] = completion("ok")
    old = idp.token(["ml-eng"])
    assert post(gw, CHAT, old, {"model": "m", "messages": HI})[0] == 200
    fetched = idp.jwks_fetches
    rotated = idp.rotate()
    assert post(gw, CHAT, idp.token(["ml-eng"], key=rotated), {"model": "m", "messages": HI})[0] == 200
    assert idp.jwks_fetches == fetched + 1  # one refetch brought the new key
    assert post(gw, CHAT, old, {"model": "m", "messages": HI})[0] == 200  # old tokens until they expire
    idp.down = True
    cached = idp.token(["ml-eng"], key=idp.keys[1])  # a key fetched before the outage, a new token
    for _ in range(5):
        assert post(gw, CHAT, cached, {"model": "m", "messages": HI})[0] == 200
        assert post(gw, CHAT, idp.token(["ml-eng"], key=new_key("RS256")), {"model": "m", "messages": HI})[0] == 401
    # every unknown kid within the refetch interval shares one fetch: the first was spent on the rotation
    assert idp.jwks_fetches <= fetched + 2


def test_a_key_the_idp_stops_publishing_ends_its_verified_tokens(gw: GatewayServer, idp: FakeIdp,
                                                                 upstream: FakeUpstream) -> None:
    """Tokens are kept verified until they expire, but only while the JWKS still holds their key: a fetch
    that drops a `kid` (a key withdrawn, compromised) ends the tokens it verified at once."""
    assert gw.app is not None and gw.app.runtime.keyring.jwt is not None
    upstream.defaults[CHAT] = completion("ok")
    withdrawn, kept = idp.token(["ml-eng"], key=idp.keys[0]), idp.token(["ml-eng"], key=idp.keys[1])
    for token in (withdrawn, kept):
        assert post(gw, CHAT, token, {"model": "m", "messages": HI})[0] == 200
    idp.keys.pop(0)
    rotated = idp.rotate()  # its first token makes the gateway fetch the JWKS, which no longer has keys[0]
    assert post(gw, CHAT, idp.token(["ml-eng"], key=rotated), {"model": "m", "messages": HI})[0] == 200
    status, body, headers = post(gw, CHAT, withdrawn, {"model": "m", "messages": HI})
    assert (status, body["error"]["code"]) == (401, "invalid_api_key")
    assert headers.get("WWW-Authenticate") == 'Bearer error="invalid_token"'
    assert post(gw, CHAT, kept, {"model": "m", "messages": HI})[0] == 200
    assert len(gw.app.runtime.keyring.jwt._verified) == 2  # kept's and the rotated key's, still verified once


def test_a_withdrawn_key_stops_verifying_with_the_periodic_refresh(idp: FakeIdp, upstream: FakeUpstream,
                                                                    make_gateway: Callable[..., GatewayServer]) -> None:
    """No token with an unknown `kid` needs to come: the JWKS fetched every `refresh_s` drops a key the IdP no
    longer publishes (compromised, say), and the tokens it verified, already kept ones included, get 401."""
    gw = make_gateway(jwt_config(upstream, idp, refresh_s=1))
    assert gw.app is not None
    jwt_auth = gw.app.runtime.keyring.jwt
    assert jwt_auth is not None
    upstream.defaults[CHAT] = completion("ok")
    withdrawn, kept = idp.token(["ml-eng"], key=idp.keys[0]), idp.token(["ml-eng"], key=idp.keys[1])
    for token in (withdrawn, kept):
        assert post(gw, CHAT, token, {"model": "m", "messages": HI})[0] == 200
    gone = idp.keys.pop(0).kid
    deadline = time.monotonic() + 20  # a refresh a second: waited for, not slept on
    while gone in jwt_auth.jwks.keys:
        assert time.monotonic() < deadline, "the JWKS was not fetched again"
        time.sleep(0.05)
    status, body, _ = post(gw, CHAT, withdrawn, {"model": "m", "messages": HI})
    assert (status, body["error"]["code"]) == (401, "invalid_api_key")
    assert post(gw, CHAT, kept, {"model": "m", "messages": HI})[0] == 200


async def _answer(gw: GatewayServer, idp: FakeIdp, token: str) -> tuple[str, int]:
    """What the gateway's key ring makes of a token (the principal's name, or the refusal's code), and how
    many JWKS fetches the IdP had answered by then."""
    assert gw.app is not None
    try:
        key = await gw.app.runtime.keyring.caller({"Authorization": f"Bearer {token}"})
        name = key.name if key is not None else "anonymous"
    except GatewayError as exc:
        name = exc.code
    return name, idp.jwks_fetches


async def _together(gw: GatewayServer, idp: FakeIdp, tokens: list[str]) -> list[tuple[str, int]]:
    """The tokens as requests arriving at once: each reaches the key ring before any JWKS fetch ends."""
    return list(await asyncio.gather(*(_answer(gw, idp, t) for t in tokens)))


def test_a_burst_with_a_rotated_key_waits_for_the_one_fetch(gw: GatewayServer, idp: FakeIdp,
                                                            servers: LoopThread) -> None:
    fetched = idp.jwks_fetches
    rotated = idp.rotate()
    sprayed = [idp.token(["ml-eng"], key=new_key("EdDSA")) for _ in range(5)]  # made-up kids, published nowhere
    good = [idp.token(["ml-eng"], key=rotated) for _ in range(5)]
    answers = servers.run(_together(gw, idp, [t for pair in zip(sprayed, good, strict=True) for t in pair]))
    # the first made-up kid passes the gate; every other token waits for that fetch, which brings the new key
    assert answers == [("invalid_api_key", fetched + 1), ("jwt:ml", fetched + 1)] * 5
    assert idp.jwks_fetches == fetched + 1
    # no fetch in flight and the gate closed: made-up kids are refused at once, with no fetch
    again = servers.run(_together(gw, idp, [idp.token(["ml-eng"], key=new_key("EdDSA")) for _ in range(5)]))
    assert again == [("invalid_api_key", fetched + 1)] * 5 and idp.jwks_fetches == fetched + 1


def test_a_failed_fetch_leaves_its_waiters_401_and_the_cached_keys(gw: GatewayServer, idp: FakeIdp,
                                                                   servers: LoopThread) -> None:
    fetched = idp.jwks_fetches
    rotated = idp.rotate()
    idp.down = True
    answers = servers.run(_together(gw, idp, [idp.token(["ml-eng"], key=rotated) for _ in range(5)]))
    assert answers == [("invalid_api_key", fetched + 1)] * 5  # each answered after the failed fetch, not before
    assert idp.jwks_fetches == fetched + 1
    cached = idp.token(["ml-eng"], key=idp.keys[1])  # a key fetched at start, a token never seen
    assert servers.run(_answer(gw, idp, cached)) == ("jwt:ml", fetched + 1)


def test_a_caller_gone_mid_fetch_leaves_the_fetch_to_the_others(gw: GatewayServer, idp: FakeIdp,
                                                                servers: LoopThread) -> None:
    fetched = idp.jwks_fetches
    rotated = idp.rotate()
    tokens = [idp.token(["ml-eng"], key=rotated) for _ in range(4)]

    async def scenario() -> list[Any]:
        calls = [asyncio.ensure_future(_answer(gw, idp, t)) for t in tokens]

        async def clients_gone() -> None:
            calls[0].cancel()  # the one that started the fetch
            calls[1].cancel()  # one waiting for it

        await asyncio.ensure_future(clients_gone())  # tasks start in order: each call has reached the fetch
        return list(await asyncio.gather(*calls, return_exceptions=True))

    answers = servers.run(scenario())
    assert [type(a).__name__ for a in answers[:2]] == ["CancelledError"] * 2
    assert answers[2:] == [("jwt:ml", fetched + 1)] * 2 and idp.jwks_fetches == fetched + 1


def test_a_reload_keeps_the_refetch_gate_closed(gw: GatewayServer, idp: FakeIdp, upstream: FakeUpstream,
                                               servers: LoopThread) -> None:
    """A SIGHUP with the same IdP keeps the last fetch's time: made-up `kid`s sent after each reload cause
    no JWKS fetch (a new gate per reload would give every SIGHUP one to them). A changed `refetch_s` is a
    new gate, open."""
    assert gw.app is not None
    fetched = idp.jwks_fetches
    assert servers.run(_answer(gw, idp, idp.token(["ml-eng"], key=idp.rotate()))) == ("jwt:ml", fetched + 1)

    async def reload(config: Config) -> None:
        assert gw.app is not None
        await gw.app.reload(config)

    for _ in range(3):
        servers.run(reload(jwt_config(upstream, idp)))
        made_up = idp.token(["ml-eng"], key=new_key("EdDSA"))
        assert servers.run(_answer(gw, idp, made_up)) == ("invalid_api_key", fetched + 1)
    servers.run(reload(jwt_config(upstream, idp, refetch_s=5)))
    made_up = idp.token(["ml-eng"], key=new_key("EdDSA"))
    assert servers.run(_answer(gw, idp, made_up)) == ("invalid_api_key", fetched + 2)


def test_a_token_is_verified_once(gw: GatewayServer, idp: FakeIdp, upstream: FakeUpstream) -> None:
    assert gw.app is not None
    verifier = gw.app.runtime.keyring.jwt
    assert verifier is not None
    token = idp.token(["ml-eng"])
    upstream.defaults[CHAT] = completion("ok")
    for _ in range(3):
        assert post(gw, CHAT, token, {"model": "m", "messages": HI})[0] == 200
    assert len(verifier._verified) == 1


def test_discovery_or_a_given_jwks_url(idp: FakeIdp, upstream: FakeUpstream,
                                       make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(jwt_config(upstream, idp, jwks_url=f"{idp.issuer}/protocol/openid-connect/certs"))
    upstream.enqueue(CHAT, completion("ok"))
    assert post(gw, CHAT, idp.token(["ml-eng"]), {"model": "m", "messages": HI})[0] == 200
    assert idp.discovery_fetches == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.dictionaries(st.sampled_from(["alg", "kid", "typ", "crit", "x5u"]),
                              st.sampled_from(["RS256", "none", "HS256", "EdDSA", "", "x" * 300]) | st.integers()
                              | st.lists(st.integers(), max_size=2), max_size=4),
       payload=st.dictionaries(st.sampled_from(["iss", "aud", "exp", "nbf", "groups", "sub", "team"]),
                               st.text(max_size=12) | st.integers() | st.lists(st.text(max_size=5), max_size=3)
                               | st.none(), max_size=7),
       sig=st.binary(max_size=64))
def test_fuzzed_tokens_never_get_a_5xx(gw: GatewayServer, upstream: FakeUpstream, header: dict[str, Any],
                                       payload: dict[str, Any], sig: bytes) -> None:
    token = ".".join(b64url(p) for p in (json.dumps(header).encode(), json.dumps(payload).encode(), sig))
    status, body, _ = post(gw, CHAT, token, {"model": "m", "messages": HI})
    assert status in (401, 403), body
    assert upstream.received == []


def test_the_log_line_names_the_subject_hashed(gw: GatewayServer, idp: FakeIdp, upstream: FakeUpstream) -> None:
    upstream.enqueue(CHAT, completion("ok"))
    token = idp.token(["ml-eng"], sub="alice@example.com")
    with capture_logs() as logs:
        assert post(gw, CHAT, token, {"model": "m", "messages": HI})[0] == 200
    line = next(e for e in logs if e["event"] == "request")
    assert line["key"] == "jwt:ml"
    assert line["subject_hash"] == hashlib.sha256(b"alice@example.com").hexdigest()[:32]
    assert "alice" not in json.dumps(logs, default=str) and token not in json.dumps(logs, default=str)


def _upgrade_status(gw: GatewayServer, token: str) -> int:
    """The status line of a WebSocket handshake on GET /v1/responses carrying `token`."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(("GET /v1/responses HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                      f"Authorization: Bearer {token}\r\n\r\n").encode())
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split(b" ", 2)[1])


def test_the_websocket_upgrade_takes_a_token(gw: GatewayServer, idp: FakeIdp) -> None:
    assert _upgrade_status(gw, idp.token(["ml-eng"])) == 101
    assert _upgrade_status(gw, idp.token(["ml-eng"], ttl_s=-120)) == 401
    rotated = idp.rotate("ES256")  # a key the gateway has not fetched yet: one refetch, then 101
    assert _upgrade_status(gw, idp.token(["ml-eng"], key=rotated)) == 101
    assert _upgrade_status(gw, idp.token(["ml-eng"], key=new_key("RS256"))) == 401
    assert _upgrade_status(gw, idp.token(["strangers"])) == 403  # its groups grant nothing
    refused = "llm_gateway_websocket_refused_total"  # counted by why: a token refused, or one that grants nothing
    assert (gw.sample(refused, reason="auth"), gw.sample(refused, reason="permission_denied")) == (2, 1)
    assert gw.sample(refused) == 3
