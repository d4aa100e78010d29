"""Claims an IdP signed that the gateway still cannot use (docs/identity.md, "What the gateway checks"):
time claims that are no numbers, or numbers past any instant (an `exp` of 400 digits once cost a 500), and
subjects the ledger cannot store (a NUL made every later PostgreSQL ledger commit fail). Each is a 401
`invalid_api_key` in the API's own shape, on the data plane and the control plane, and the ledger keeps
recording everyone else, on a SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.control_plane import admin_call, raw_config
from tests.fake_idp import AUDIENCE, FakeIdp
from tests.harness import GatewayServer
from tests.integration.test_jwt_auth import CHAT, HI, post

NOW = int(time.time())
HUGE = 10**400  # valid JSON, a float overflow


@pytest.fixture
def gw(tmp_path: Path, idp: FakeIdp, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(_config(f"sqlite:///{tmp_path}/claims.db", idp))


def _config(store_url: str, idp: FakeIdp) -> Any:
    raw: dict[str, Any] = raw_config(store_url)
    raw["admin"]["jwt_groups"] = {"platform-admins": "admin"}
    raw["auth"]["jwt"] = {"issuer": idp.issuer, "audience": AUDIENCE, "groups": {"ml-eng": {"team": "ml"}}}
    return parse_config(raw, env={})


# (claim, value, whether PyJWT lets it through to the gateway's own check, whose log reason names the
# claim); an `exp` PyJWT reads as past (-10**400, `true`) is refused by it as expired: a 401 as well
BAD_TIMES: list[tuple[str, Any, bool]] = [
    ("exp", HUGE, True), ("exp", 1e300, True), ("exp", str(NOW + 300), True), ("exp", float("inf"), False),
    ("exp", float("nan"), False), ("exp", [NOW + 300], False), ("exp", {"at": NOW}, False),
    ("nbf", -HUGE, True), ("nbf", True, True), ("nbf", -1, True), ("nbf", HUGE, False), ("nbf", float("-inf"), False),
    ("iat", -HUGE, True), ("iat", True, True), ("iat", str(NOW), True), ("iat", float("nan"), False),
]


# ids without the clock in them: every xdist worker must collect the same ones
@pytest.mark.parametrize(("claim", "value", "ours"), BAD_TIMES,
                         ids=[f"{c}-{type(v).__name__}-{i}" for i, (c, v, _) in enumerate(BAD_TIMES)])
def test_a_time_claim_past_any_instant_or_no_number_is_a_401(gw: GatewayServer, idp: FakeIdp,
                                                             claim: str, value: Any, ours: bool) -> None:
    token = idp.token(["ml-eng", "platform-admins"], key=idp.keys[2], **{claim: value})
    with capture_logs() as logs:
        status, body, headers = post(gw, CHAT, token, {"model": "m", "messages": HI})
    assert (status, body["error"]["code"]) == (401, "invalid_api_key"), body
    assert body["error"]["message"] == "invalid token"  # which check failed is the log's, not the client's
    assert headers.get("WWW-Authenticate") == 'Bearer error="invalid_token"'
    reasons = [e["reason"] for e in logs if e["event"] == "request"]
    assert reasons == [f"jwt_bad_{claim}" if ours else "invalid_api_key"]
    status, body, _ = post(gw, "/v1/messages", token, {"model": "m", "max_tokens": 5, "messages": HI}, "x-api-key")
    assert status == 401 and body["error"]["type"] == "authentication_error"
    status, body = admin_call(gw.port, "GET", "me", key=token)
    assert (status, body["error"]["code"]) == (401, "invalid_api_key")


BAD_SUBJECTS = ["alice\x00@example.com", "\x00", "bob\x1b[31m", "line\nbreak", "\ud800", "x" * 256]


@pytest.mark.parametrize("sub", BAD_SUBJECTS, ids=["nul", "only_nul", "escape", "newline", "surrogate", "256"])
def test_a_subject_the_ledger_cannot_store_is_a_401(gw: GatewayServer, idp: FakeIdp, sub: str) -> None:
    token = idp.token(["ml-eng", "platform-admins"], key=idp.keys[2], sub=sub)
    status, body, headers = post(gw, CHAT, token, {"model": "m", "messages": HI})
    assert (status, body["error"]["code"]) == (401, "invalid_api_key"), body
    assert headers.get("WWW-Authenticate") == 'Bearer error="invalid_token"'
    assert admin_call(gw.port, "GET", "me", key=token)[0] == 401  # the audit log names an admin by it


def test_a_long_unicode_subject_within_the_bound_works(gw: GatewayServer, idp: FakeIdp) -> None:
    sub = "é" * 254 + "\u200d"  # 255 characters, a format character among them: storable
    client = openai.OpenAI(base_url=gw.base_url, api_key=idp.token(["ml-eng"], sub=sub), max_retries=0)
    assert client.chat.completions.create(model="m", messages=HI).choices  # type: ignore[arg-type]
    rows = admin_call(gw.port, "GET", "spend?group_by=subject")[1]["data"]
    assert [(r["subject"], r["requests"]) for r in rows] == [(sub, 1)]


@pytest.mark.parametrize("sub", ["alice\x00@example.com", "\udfff"], ids=["nul", "surrogate"])
def test_the_ledger_keeps_recording_after_a_bad_subject(store_url: str, idp: FakeIdp, sub: str,
                                                        make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(_config(store_url, idp))
    bad = openai.OpenAI(base_url=gw.base_url, api_key=idp.token(["ml-eng"], sub=sub), max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="m", messages=HI)  # type: ignore[arg-type]
    good = openai.OpenAI(base_url=gw.base_url, api_key=idp.token(["ml-eng"], sub="carol"), max_retries=0)
    assert good.chat.completions.create(model="m", messages=HI).choices  # type: ignore[arg-type]
    rows = admin_call(gw.port, "GET", "spend?group_by=subject")[1]["data"]
    assert [(r["subject"], r["requests"]) for r in rows] == [("carol", 1)]
    assert gw.app is not None and gw.app.runtime.control is not None
    assert not gw.app.runtime.control.ledger.failing


CLAIM_VALUES = (st.integers() | st.integers(min_value=10**400) | st.integers(max_value=-(10**400))
                | st.floats() | st.booleans() | st.text(max_size=8) | st.none() | st.lists(st.integers(), max_size=2))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(claims=st.fixed_dictionaries({}, optional={"exp": CLAIM_VALUES, "nbf": CLAIM_VALUES, "iat": CLAIM_VALUES,
                                                  "sub": CLAIM_VALUES | st.text(max_size=300)}))
@example(claims={"exp": HUGE})  # found by an audit: a 500
def test_signed_tokens_with_any_claim_values_never_get_a_5xx(gw: GatewayServer, idp: FakeIdp,
                                                             claims: dict[str, Any]) -> None:
    """Unlike tests/integration/test_jwt_auth.py's fuzzing, these tokens verify: each value reaches the
    checks after the signature's."""
    claims.setdefault("exp", NOW + 300)  # None: left out (FakeIdp.token drops it)
    token = idp.token(["ml-eng", "platform-admins"], key=idp.keys[2], **claims)
    status, body, _ = post(gw, CHAT, token, {"model": "m", "messages": HI})
    assert status in (200, 401), (status, body, json.dumps(claims, default=str)[:200])
    assert admin_call(gw.port, "GET", "me", key=token)[0] in (200, 401)
