"""Admin roles on every `/admin/v1` route (docs/identity.md, "Admin roles"): a table of route x caller,
for admin keys of each role, a stored admin key, and IdP tokens mapped by `admin.jwt_groups`. Each
allowed call succeeds; a role that may not call a route gets 403; a team admin asking for another team's
objects gets 404, as if they did not exist."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.apis.admin_auth import admin_principal
from gateway.config import parse_config
from gateway.core.policy.roles import AdminPrincipal
from tests.control_plane import ADMIN_KEY, admin_call, raw_config
from tests.fake_idp import AUDIENCE, FakeIdp
from tests.harness import GatewayServer, LoopThread

LEAD_A, LEAD_B, VIEWER = "adm-lead-a-" + "a" * 30, "adm-lead-b-" + "b" * 30, "adm-viewer-" + "v" * 30


@pytest.fixture
def gw(tmp_path: Path, idp: FakeIdp, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    raw: dict[str, Any] = raw_config(f"sqlite:///{tmp_path}/roles.db")
    raw["admin"] = {
        "keys": [{"name": "platform", "key": ADMIN_KEY},
                 {"name": "lead-a", "key": LEAD_A, "role": "team_admin", "team": "a"},
                 {"name": "lead-b", "key": LEAD_B, "role": "team_admin", "team": "b"},
                 {"name": "auditor", "key": VIEWER, "role": "viewer"}],
        "jwt_groups": {"platform-admins": "admin", "leads-a": {"role": "team_admin", "team": "a"},
                       "finance": "viewer"}}
    raw["auth"]["jwt"] = {"issuer": idp.issuer, "audience": AUDIENCE, "groups": {"ml-eng": {"team": "a"}}}
    gw = make_gateway(parse_config(raw, env={}))
    for team in ("a", "b"):
        assert admin_call(gw.port, "POST", "teams", {"name": team, "rpm": 100, "budget_usd": 10})[0] == 201
    for name, team in (("key-a", "a"), ("key-b", "b")):
        assert admin_call(gw.port, "POST", "keys", {"name": name, "team": team})[0] == 201
    return gw


def _callers(idp: FakeIdp) -> dict[str, str]:
    return {"admin": ADMIN_KEY, "lead_a": LEAD_A, "lead_b": LEAD_B, "viewer": VIEWER,
            "jwt_admin": idp.token(["platform-admins"]), "jwt_lead_a": idp.token(["leads-a", "ml-eng"]),
            "jwt_viewer": idp.token(["finance"])}


# (method, path, body) -> the status each caller gets; a team admin of team a acts on team a's objects
ROUTES: list[tuple[str, str, Any, dict[str, int]]] = [
    ("GET", "keys", None, {"admin": 200, "lead_a": 200, "lead_b": 200, "viewer": 403}),
    ("GET", "keys/key-a", None, {"admin": 200, "lead_a": 200, "lead_b": 404, "viewer": 403}),
    ("PATCH", "keys/key-a", {"rpm": 50}, {"admin": 200, "lead_a": 200, "lead_b": 404, "viewer": 403}),
    ("POST", "keys/key-a/rotate", {}, {"admin": 200, "lead_a": 200, "lead_b": 404, "viewer": 403}),
    ("GET", "teams", None, {"admin": 200, "lead_a": 200, "lead_b": 200, "viewer": 403}),
    ("GET", "teams/a", None, {"admin": 200, "lead_a": 200, "lead_b": 404, "viewer": 403}),
    ("PATCH", "teams/a", {"rpm": 90}, {"admin": 200, "lead_a": 403, "lead_b": 403, "viewer": 403}),
    ("POST", "teams", {"name": "new-team"}, {"admin": 201, "lead_a": 403, "lead_b": 403, "viewer": 403}),
    ("GET", "spend?group_by=team", None, {"admin": 200, "lead_a": 200, "lead_b": 200, "viewer": 200}),
    ("GET", "stats", None, {"admin": 200, "lead_a": 200, "lead_b": 200, "viewer": 200}),
    ("GET", "audit", None, {"admin": 200, "lead_a": 200, "lead_b": 200, "viewer": 403}),
    ("GET", "me", None, {"admin": 200, "lead_a": 200, "lead_b": 200, "viewer": 200}),
    ("GET", "admin-keys", None, {"admin": 200, "lead_a": 403, "lead_b": 403, "viewer": 403}),
]
JWT_OF = {"jwt_admin": "admin", "jwt_lead_a": "lead_a", "jwt_viewer": "viewer"}


@pytest.mark.parametrize(("method", "path", "body", "expected"), ROUTES, ids=[f"{m} {p}" for m, p, _, _ in ROUTES])
def test_every_route_for_every_role(gw: GatewayServer, idp: FakeIdp, method: str, path: str, body: Any,
                                    expected: dict[str, int]) -> None:
    for caller, credential in _callers(idp).items():
        want = expected[JWT_OF.get(caller, caller)]
        status, answer = admin_call(gw.port, method, path, body, key=credential)
        assert status == want, (caller, method, path, answer)
        if status == 403:
            assert answer["error"]["code"] == "permission_denied"
        if status == 201 and path == "teams":  # created once per caller that may: undo it for the next
            assert admin_call(gw.port, "DELETE", f"teams/{body['name']}")[0] == 200


def test_a_team_admin_sees_and_writes_only_its_team(gw: GatewayServer) -> None:
    status, keys = admin_call(gw.port, "GET", "keys", key=LEAD_A)
    assert status == 200 and [k["name"] for k in keys["data"]] == ["key-a"]
    assert [t["name"] for t in admin_call(gw.port, "GET", "teams", key=LEAD_A)[1]["data"]] == ["a"]
    # a key is created in its own team, whatever it asks, and within the team's own limits
    status, made = admin_call(gw.port, "POST", "keys", {"name": "mine"}, key=LEAD_A)
    assert status == 201 and made["team"] == "a"
    assert admin_call(gw.port, "POST", "keys", {"name": "theirs", "team": "b"}, key=LEAD_A)[0] == 404
    status, err = admin_call(gw.port, "POST", "keys", {"name": "big", "rpm": 1000}, key=LEAD_A)
    assert (status, err["error"]["param"]) == (400, "rpm")
    status, err = admin_call(gw.port, "POST", "keys", {"name": "rich", "budget_usd": 11}, key=LEAD_A)
    assert (status, err["error"]["param"]) == (400, "budget_usd")
    assert admin_call(gw.port, "PATCH", "keys/mine", {"team": "b"}, key=LEAD_A)[0] == 404
    assert admin_call(gw.port, "DELETE", "keys/key-b", key=LEAD_A)[0] == 404
    assert admin_call(gw.port, "GET", "keys/key-b")[0] == 200  # still there
    assert admin_call(gw.port, "DELETE", "keys/mine", key=LEAD_A)[0] == 200


def test_a_team_admins_key_may_leave_its_limits_to_the_team(gw: GatewayServer) -> None:
    """A limit a team admin's key leaves out is the team's (a key in a team uses only the models both
    allow); a change is checked on the fields it sets, not on one an admin set above the team's."""
    assert admin_call(gw.port, "PATCH", "teams/a", {"models": ["m"]}, key=ADMIN_KEY)[0] == 200
    status, plain = admin_call(gw.port, "POST", "keys", {"name": "plain"}, key=LEAD_A)
    assert (status, plain["team"], plain["models"]) == (201, "a", None), plain
    assert admin_call(gw.port, "POST", "keys", {"name": "slow", "rpm": 50}, key=LEAD_A)[0] == 201
    assert admin_call(gw.port, "PATCH", "keys/key-a", {"rpm": 10}, key=LEAD_A)[0] == 200
    assert admin_call(gw.port, "PATCH", "keys/plain", {"models": None}, key=LEAD_A)[0] == 200
    status, err = admin_call(gw.port, "PATCH", "keys/plain", {"models": ["m", "other"]}, key=LEAD_A)
    assert (status, err["error"]["param"]) == (400, "models")
    assert admin_call(gw.port, "POST", "keys", {"name": "wide", "team": "a", "rpm": 500})[0] == 201  # by an admin
    assert admin_call(gw.port, "PATCH", "keys/wide", {"metadata": {"owner": "x"}}, key=LEAD_A)[0] == 200
    status, err = admin_call(gw.port, "PATCH", "keys/wide", {"rpm": 101}, key=LEAD_A)
    assert (status, err["error"]["param"]) == (400, "rpm")
    _ask(gw, plain["key"])
    with pytest.raises(openai.NotFoundError):  # the team's models only
        _ask(gw, plain["key"], "other")


def test_a_limit_of_zero_refuses_every_request(tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    """rpm 0 or tpm 0 (on a key, a team, a config key) is a frozen key: 429 every time; budget 0 likewise."""
    raw: dict[str, Any] = raw_config(f"sqlite:///{tmp_path}/zero.db")
    raw["auth"]["keys"].append({"name": "frozen-config", "key": "sk-frozen-" + "f" * 20, "rpm": 0})
    gw = make_gateway(parse_config(raw, env={}))
    status, team = admin_call(gw.port, "POST", "teams", {"name": "frozen", "rpm": 0})
    assert (status, team["rpm"]) == (201, 0), team
    secrets = {"frozen-config": ("sk-frozen-" + "f" * 20, "rate_limit_exceeded")}
    for name, body, code in (("rpm0", {"rpm": 0}, "rate_limit_exceeded"), ("tpm0", {"tpm": 0}, "rate_limit_exceeded"),
                             ("in-frozen", {"team": "frozen"}, "rate_limit_exceeded"),
                             ("broke", {"budget_usd": 0}, "budget_exceeded")):
        status, made = admin_call(gw.port, "POST", "keys", {"name": name, **body})
        assert status == 201, made
        secrets[name] = (made["key"], code)
    for name, (secret, code) in secrets.items():
        for _ in range(3):
            with pytest.raises(openai.RateLimitError) as info:
                _ask(gw, secret)
            assert info.value.code == code, name
            if code == "rate_limit_exceeded":  # never fits: come back after a whole window
                assert info.value.response.headers["retry-after"] == "60", name
    assert admin_call(gw.port, "PATCH", "keys/rpm0", {"rpm": None})[0] == 200  # thawed
    _ask(gw, secrets["rpm0"][0])


def _ask(gw: GatewayServer, secret: str, model: str = "m") -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=secret, max_retries=0)
    assert client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}]).choices


def test_a_team_admins_spend_and_audit_are_its_teams(gw: GatewayServer) -> None:
    key_a = admin_call(gw.port, "POST", "keys/key-a/rotate", {})[1]["key"]
    key_b = admin_call(gw.port, "POST", "keys/key-b/rotate", {})[1]["key"]
    for key in (key_a, key_b):
        client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    teams = {r["team"] for r in admin_call(gw.port, "GET", "spend?group_by=team", key=LEAD_A)[1]["data"]}
    assert teams == {"a"}
    assert {r["team"] for r in admin_call(gw.port, "GET", "spend?group_by=team")[1]["data"]} == {"a", "b"}
    audit = admin_call(gw.port, "GET", "audit", key=LEAD_A)[1]["data"]
    assert audit and {e["name"] for e in audit} <= {"a", "key-a"}


def test_a_team_created_again_under_its_name_shows_its_admin_nothing_of_the_old(gw: GatewayServer) -> None:
    """The config's team admin of `a` follows the name; its spend and audit are the team's that has it now."""
    _ask(gw, admin_call(gw.port, "POST", "keys/key-a/rotate", {})[1]["key"])
    assert [r["team"] for r in admin_call(gw.port, "GET", "spend?group_by=team", key=LEAD_A)[1]["data"]] == ["a"]
    assert admin_call(gw.port, "DELETE", "keys/key-a")[0] == 200
    assert admin_call(gw.port, "DELETE", "teams/a")[0] == 200
    assert admin_call(gw.port, "POST", "teams", {"name": "a"})[0] == 201
    assert admin_call(gw.port, "GET", "spend?group_by=team,key", key=LEAD_A)[1]["data"] == []
    assert [e["action"] for e in admin_call(gw.port, "GET", "audit", key=LEAD_A)[1]["data"]] == ["team.create"]
    rows = admin_call(gw.port, "GET", "spend?group_by=team")[1]["data"]  # an admin still sees the old team's
    assert [(r["team"], r["requests"]) for r in rows] == [("a", 1)]


def test_the_audit_names_the_actor_and_me_answers_every_role(gw: GatewayServer, idp: FakeIdp) -> None:
    token = idp.token(["platform-admins"], sub="carol@example.com")
    assert admin_call(gw.port, "PATCH", "keys/key-a", {"rpm": 7}, key=token)[0] == 200
    assert admin_call(gw.port, "PATCH", "keys/key-a", {"rpm": 8}, key=LEAD_A)[0] == 200
    # a subject chosen at the IdP that is an admin key's name: the audit still tells the two apart
    posing = idp.token(["leads-a"], sub="platform")
    assert admin_call(gw.port, "PATCH", "keys/key-a", {"rpm": 9}, key=posing)[0] == 200
    actors = [e["admin"] for e in admin_call(gw.port, "GET", "audit")[1]["data"][:3]]
    assert actors == ["jwt:platform", "lead-a", "jwt:carol@example.com"]
    assert admin_call(gw.port, "GET", "me", key=token)[1]["name"] == "jwt:carol@example.com"
    assert admin_call(gw.port, "GET", "me", key=LEAD_A)[1] == {"object": "gateway.admin", "name": "lead-a",
                                                              "role": "team_admin", "team": "a"}
    me = admin_call(gw.port, "GET", "me", key=idp.token(["finance", "leads-a"]))[1]  # the strongest role
    assert (me["role"], me["team"]) == ("team_admin", "a")


def test_stored_admin_keys(gw: GatewayServer) -> None:
    status, made = admin_call(gw.port, "POST", "admin-keys", {"name": "ci-lead", "role": "team_admin", "team": "b"})
    assert status == 201 and made["key"].startswith("sk-gw-admin-")
    assert admin_call(gw.port, "GET", "keys", key=made["key"])[1]["data"][0]["name"] == "key-b"
    assert admin_call(gw.port, "POST", "admin-keys", {"name": "x", "role": "viewer"}, key=made["key"])[0] == 403
    assert admin_call(gw.port, "POST", "admin-keys", {"name": "bad", "role": "team_admin"})[0] == 400
    assert admin_call(gw.port, "POST", "admin-keys", {"name": "ci-lead", "role": "viewer"})[0] == 409
    assert [k["name"] for k in admin_call(gw.port, "GET", "admin-keys")[1]["data"]] == ["ci-lead"]
    assert admin_call(gw.port, "DELETE", "admin-keys/ci-lead")[0] == 200
    assert admin_call(gw.port, "GET", "keys", key=made["key"])[0] == 401  # revoked: at once
    # an admin key is never a gateway key, nor a gateway key an admin key
    client = openai.OpenAI(base_url=gw.base_url, api_key=ADMIN_KEY, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_a_team_with_team_admin_keys_cannot_be_deleted(gw: GatewayServer) -> None:
    """Its team admins name the team: left behind, they would govern a team created later under its name."""
    assert admin_call(gw.port, "POST", "teams", {"name": "gone"})[0] == 201
    status, made = admin_call(gw.port, "POST", "admin-keys", {"name": "lead-gone", "role": "team_admin",
                                                              "team": "gone"})
    assert status == 201
    status, err = admin_call(gw.port, "DELETE", "teams/gone")
    assert (status, err["error"]["code"]) == (409, "conflict"), err
    assert admin_call(gw.port, "DELETE", "admin-keys/lead-gone")[0] == 200
    assert admin_call(gw.port, "DELETE", "teams/gone")[0] == 200
    assert admin_call(gw.port, "GET", "keys", key=made["key"])[0] == 401


def test_admin_key_errors_are_those_of_gateway_keys(gw: GatewayServer) -> None:
    """A name taken by a config admin key is 409, as one taken by a stored admin key (or a gateway key by
    a config key); a team that does not exist is a bad field, 400 `team`, as on a gateway key."""
    for path, body in (("admin-keys", {"name": "lead-a", "role": "viewer"}), ("keys", {"name": "from-config"})):
        status, err = admin_call(gw.port, "POST", path, body)
        assert (status, err["error"]["code"]) == (409, "conflict"), (path, err)
    for path, body in (("admin-keys", {"name": "lead-c", "role": "team_admin", "team": "c"}),
                       ("keys", {"name": "key-c", "team": "c"})):
        status, err = admin_call(gw.port, "POST", path, body)
        assert (status, err["error"]["param"]) == (400, "team"), (path, err)
    assert admin_call(gw.port, "GET", "admin-keys")[1]["data"] == []


def test_tokens_without_an_admin_group_or_invalid_are_refused(gw: GatewayServer, idp: FakeIdp) -> None:
    status, err = admin_call(gw.port, "GET", "me", key=idp.token(["ml-eng"]))
    assert (status, err["error"]["code"]) == (403, "permission_denied")
    assert admin_call(gw.port, "GET", "me", key=idp.token(["platform-admins"], ttl_s=-120))[0] == 401
    assert admin_call(gw.port, "GET", "me", key=idp.token(["platform-admins"], aud="other"))[0] == 401


def test_spend_by_subject_for_idp_callers(gw: GatewayServer, idp: FakeIdp) -> None:
    token = idp.token(["ml-eng"], sub="dave@example.com")
    client = openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    rows = admin_call(gw.port, "GET", "spend?group_by=subject,team")[1]["data"]
    assert [(r["subject"], r["team"], r["requests"]) for r in rows] == [("dave@example.com", "a", 1)]
    assert admin_call(gw.port, "GET", "spend?group_by=subject", key=LEAD_B)[1]["data"] == []  # team b's view


def test_admins_with_a_rotated_key_wait_for_the_one_fetch(gw: GatewayServer, idp: FakeIdp,
                                                          servers: LoopThread) -> None:
    assert gw.app is not None and gw.app.runtime.control is not None
    rt, control = gw.app.runtime, gw.app.runtime.control
    fetched = idp.jwks_fetches
    rotated = idp.rotate("ES256")
    tokens = [idp.token(["platform-admins"], key=rotated, sub=f"admin-{i}") for i in range(5)]

    async def together() -> list[AdminPrincipal]:  # requests arriving at once: one fetch, the others wait for it
        return list(await asyncio.gather(*(admin_principal(rt.config, rt.keyring.jwt, control,
                                                           {"authorization": f"Bearer {t}"}) for t in tokens)))

    who = servers.run(together())
    assert [(p.name, p.role) for p in who] == [(f"admin-{i}", "admin") for i in range(5)]
    assert idp.jwks_fetches == fetched + 1
