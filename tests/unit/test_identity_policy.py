"""The pure parts of IdP tokens (core.policy.identity) and the verifier's refusals under fuzzing: whatever a
token's header and payload hold, the answer is a principal or a 401/403, never another exception (a 5xx)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import jwt
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.config.types import ApiKey, JwtConfig, JwtGroup
from gateway.core.policy.identity import (
    Grant,
    GroupRule,
    RefetchGate,
    Refusal,
    TokenCache,
    claim_groups,
    claims_fault,
    grant_for,
    looks_like_jwt,
)
from gateway.errors import ExpiredApiKey, InvalidApiKey, PermissionDenied
from gateway.pipeline.jwt_auth import Jwks, JwtAuth, SigningKeyUnknown
from tests.fake_idp import AUDIENCE, b64url, new_key

ISSUER = "https://idp.test/realms/x"
RULES = (GroupRule("ml", "ml", ("m",)), GroupRule("ops", "ops", ("o",)), GroupRule("all", None, None))


def test_jwt_shape() -> None:
    assert looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln")
    assert looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")  # unsigned: still verified, and refused
    assert not looks_like_jwt("sk-live-abc.def.ghi")
    assert not looks_like_jwt("eyJ" + "a" * 20000 + ".b.c")


def test_grant_is_the_union_and_the_first_mapped_team() -> None:
    g = grant_for({"groups": ["ops", "ml"], "sub": "u1"}, RULES, "groups", None, frozenset())
    assert g == Grant("ml", ("m", "o"), "u1")
    assert grant_for({"groups": ["all"]}, RULES, "groups", None, frozenset()) == Refusal("no team")
    teams = frozenset({"t"})
    assert grant_for({"groups": ["all"], "team": "t"}, RULES, "groups", "team", teams) == Grant("t", None, "")
    assert grant_for({"groups": ["all"], "team": "t"}, RULES, "groups", "team", frozenset()) == Refusal("no team")
    assert grant_for({"groups": ["nobody"]}, RULES, "groups", None, frozenset()) == Refusal("no mapped group")
    assert grant_for({"groups": "ml"}, RULES, "groups", None, frozenset()) == Grant("ml", ("m",), "")


def test_nested_group_claims() -> None:
    assert claim_groups({"realm_access": {"roles": ["a", 1, "b"]}}, "realm_access.roles") == ("a", "b")
    assert claim_groups({"realm_access": "x"}, "realm_access.roles") == ()


def test_refetch_gate_allows_two_a_minute_at_most() -> None:
    gate = RefetchGate(30.0)
    passed = sum(gate.try_pass(t * 0.5) for t in range(120))  # an unknown kid every half second for a minute
    assert passed == 2


def test_token_cache_is_bounded_and_drops_expired() -> None:
    cache: TokenCache[int] = TokenCache(max_entries=3)
    for i in range(5):
        cache.put(bytes([i]), i, until=100.0)
    assert len(cache) == 3 and cache.get(bytes([0]), 0.0) is None and cache.get(bytes([4]), 0.0) == 4
    assert cache.get(bytes([4]), 100.0) is None and len(cache) == 2


def test_claims_fault_names_the_first_unusable_claim() -> None:
    good = {"exp": 1_900_000_000, "nbf": 0, "iat": 1_800_000_000.5, "sub": "ü" * 255}
    assert claims_fault(good) is None and claims_fault({}) is None
    for claim, value in [("exp", 10**400), ("exp", 1e300), ("exp", float("nan")), ("exp", float("inf")),
                         ("exp", "1900000000"), ("exp", True), ("nbf", -1), ("nbf", -(10**400)), ("iat", False),
                         ("iat", None), ("iat", [1]), ("sub", "a\x00b"), ("sub", "\x7f"), ("sub", "\x85"),
                         ("sub", "\udc00"), ("sub", "x" * 256), ("sub", 7)]:
        assert claims_fault({**good, claim: value}) == claim, (claim, value)
    assert claims_fault({**good, "exp": "x", "sub": "\x00"}) == "exp"  # the first, in a fixed order


KEYS = [new_key("RS256"), new_key("ES256"), new_key("EdDSA")]


def _auth() -> JwtAuth:
    cfg = JwtConfig(issuer=ISSUER, audience=AUDIENCE, jwks_url="https://idp.test/jwks",
                    groups=(JwtGroup("ml", "ml", ("m",)),))

    async def no_fetch(url: str, timeout_s: float, label: str) -> Any:
        raise OSError("offline")

    jwks = Jwks(cfg, no_fetch)
    jwks.keys = {k.kid: k.public_jwk() for k in KEYS}
    return JwtAuth(cfg, jwks)


def _claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 60, "sub": "u", "groups": ["ml"], **over}


def test_a_good_token_gives_the_team_principal() -> None:
    auth = _auth()
    for k in KEYS:
        token = jwt.encode(_claims(), k.private, algorithm=k.alg, headers={"kid": k.kid})
        key = auth.principal(token)
        assert (key.name, key.models, key.subject) == ("jwt:ml", ("m",), "u")
        assert key.team is not None and key.team.name == "ml"


def test_a_withdrawn_key_ends_the_tokens_it_verified() -> None:
    auth = _auth()
    tokens = [jwt.encode(_claims(), k.private, algorithm=k.alg, headers={"kid": k.kid}) for k in KEYS]
    digests = [hashlib.sha256(t.encode()).digest() for t in tokens]
    for t in tokens:
        auth.principal(t)
    same = {k.kid: k.public_jwk() for k in KEYS}  # a fetch that brings the same keys: nothing forgotten
    auth.jwks.keys = same
    assert all(auth.cached(d) is not None for d in digests)
    changed = new_key("RS256").public_jwk()  # the first kid now names other key material
    auth.jwks.keys = {**same, KEYS[0].kid: {**changed, "kid": KEYS[0].kid}}
    assert auth.cached(digests[0]) is None and auth.cached(digests[1]) is not None
    with pytest.raises(InvalidApiKey):
        auth.principal(tokens[0])
    auth.jwks.keys = {KEYS[2].kid: KEYS[2].public_jwk()}  # the second withdrawn
    assert auth.cached(digests[1]) is None and auth.cached(digests[2]) is not None
    with pytest.raises(SigningKeyUnknown):
        auth.principal(tokens[1])


def test_a_key_of_another_type_than_the_header_says_is_refused() -> None:
    auth = _auth()
    rsa, ec = KEYS[0], KEYS[1]
    token = jwt.encode(_claims(), ec.private, algorithm="ES256", headers={"kid": rsa.kid})
    with pytest.raises(InvalidApiKey):
        auth.principal(token)


def test_an_unknown_kid_asks_for_a_refetch_and_the_refetch_is_gated() -> None:
    auth = _auth()
    stranger = new_key("RS256")
    token = jwt.encode(_claims(), stranger.private, algorithm="RS256", headers={"kid": stranger.kid})
    with pytest.raises(SigningKeyUnknown):
        auth.principal(token)
    assert asyncio.run(auth.refetch()) is True
    assert asyncio.run(auth.refetch()) is False
    assert auth.jwks.fetches == 1


_scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
_json = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
_header = st.fixed_dictionaries({}, optional={
    "alg": st.sampled_from(["RS256", "ES256", "EdDSA", "HS256", "none", "PS256", "ES512", "RS1"]) | _json,
    "kid": st.sampled_from([k.kid for k in KEYS]) | _json, "typ": _json, "crit": _json, "jku": _json})
_payload = st.fixed_dictionaries({}, optional={
    "iss": st.just(ISSUER) | _json, "aud": st.just(AUDIENCE) | _json,
    "exp": st.integers() | st.integers(min_value=10**309) | _json,  # past a float's range too
    "nbf": st.integers() | _json, "iat": _json, "sub": _json, "groups": st.just(["ml"]) | _json})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=_header, payload=_payload, signed_by=st.sampled_from([None, 0, 1, 2]), sig=st.binary(max_size=80))
@example(header={"kid": KEYS[2].kid}, payload=_claims(exp=10**400), signed_by=2, sig=b"")  # was an OverflowError
def test_fuzzed_tokens_get_a_principal_or_a_refusal(header: dict[str, Any], payload: dict[str, Any],
                                                     signed_by: int | None, sig: bytes) -> None:
    head, body = b64url(json.dumps(header).encode()), b64url(json.dumps(payload).encode())
    if signed_by is None:
        token = f"{head}.{body}.{b64url(sig)}"
    else:
        k = KEYS[signed_by]
        extra = {h: v for h, v in header.items() if h not in ("alg", "typ")}
        try:
            token = jwt.encode(payload, k.private, algorithm=k.alg, headers=extra)
        except Exception:  # a header PyJWT will not write: the unsigned form instead
            token = f"{head}.{body}.{b64url(sig)}"
    if not looks_like_jwt(token):
        return
    try:
        out = _auth().principal(token)
    except (InvalidApiKey, ExpiredApiKey, PermissionDenied, SigningKeyUnknown):
        return
    assert isinstance(out, ApiKey) and out.name == "jwt:ml"
