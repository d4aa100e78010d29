"""The control plane end to end (CONTRACT §11) on a real SQLite file and a real PostgreSQL server: the
admin API creates teams and keys, the official `openai` SDK uses the created keys, spend is read back by
team, rotation keeps the old key for its grace only, revocation refuses it, and the errors are the
OpenAI shape."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest
from structlog.testing import capture_logs

from tests.control_plane import ADMIN_KEY, CONFIG_KEY, admin_call, store_config
from tests.harness import GatewayServer, LoopThread


@pytest.fixture
def gateway(servers: LoopThread, store_url: str) -> Iterator[GatewayServer]:
    gw = GatewayServer(store_config(store_url))
    servers.run(gw.start())
    yield gw
    servers.run(gw.stop())


def _client(gw: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


def _chat(gw: GatewayServer, key: str, model: str = "m", stream: bool = False) -> str:
    client = _client(gw, key)
    if stream:
        parts = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                               stream=True)
        return "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
    answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    return answer.choices[0].message.content or ""


def test_admin_api_end_to_end_with_the_sdk(gateway: GatewayServer) -> None:
    port = gateway.port
    status, team = admin_call(port, "POST", "teams", {"name": "search", "budget_usd": 100, "models": ["m"]})
    assert status == 201 and team["name"] == "search" and team["models"] == ["m"]
    status, created = admin_call(port, "POST", "keys", {"name": "alice", "team": "search", "rpm": 100,
                                                        "metadata": {"owner": "alice@example.com"}})
    assert status == 201, created
    secret = created["key"]
    assert secret.startswith("sk-gw-") and created["team"] == "search"

    assert _chat(gateway, secret)  # the created key serves at once on this replica, whole and streamed
    assert _chat(gateway, secret, stream=True)
    assert _chat(gateway, CONFIG_KEY)  # config keys keep working beside stored ones
    with pytest.raises((openai.NotFoundError, openai.PermissionDeniedError)):  # the team's model list
        _chat(gateway, secret, model="other")

    status, listed = admin_call(port, "GET", "keys")
    assert status == 200 and [k["name"] for k in listed["data"]] == ["alice"]
    assert secret not in str(listed) and "key" not in listed["data"][0]
    status, read = admin_call(port, "GET", "keys/alice")
    assert read["rpm"] == 100 and read["metadata"] == {"owner": "alice@example.com"}
    status, patched = admin_call(port, "PATCH", "keys/alice", {"rpm": None, "tpm": 50000})
    assert status == 200 and patched["rpm"] is None and patched["tpm"] == 50000

    status, spend = admin_call(port, "GET", "spend?group_by=team,model")
    assert status == 200
    rows = {(r["team"], r["model"]): r for r in spend["data"]}
    assert rows[("search", "m")]["requests"] == 2
    assert rows[("search", "m")]["output_tokens"] > 0 and rows[("search", "m")]["cost_usd"] > 0
    assert rows[(None, "m")]["requests"] == 1  # the config key's
    today = time.strftime("%Y-%m-%d", time.gmtime())
    status, by_day = admin_call(port, "GET", f"spend?group_by=key,day&from={today}&to={today}")
    assert {(r["key"], r["day"]) for r in by_day["data"]} == {("alice", today), ("from-config", today)}
    status, empty = admin_call(port, "GET", "spend?group_by=key&from=2001-01-01&to=2001-01-31")
    assert status == 200 and empty["data"] == []

    status, _ = admin_call(port, "DELETE", "keys/alice")
    assert status == 200
    with pytest.raises(openai.AuthenticationError):
        _chat(gateway, secret)
    status, audit = admin_call(port, "GET", "audit")
    assert [(a["action"], a["name"], a["admin"]) for a in audit["data"]] == [
        ("key.revoke", "alice", "platform"), ("key.update", "alice", "platform"),
        ("key.create", "alice", "platform"), ("team.create", "search", "platform")]


def test_rotation_keeps_the_old_key_for_its_grace_only(gateway: GatewayServer) -> None:
    port = gateway.port
    _, first = admin_call(port, "POST", "keys", {"name": "bob"})
    status, second = admin_call(port, "POST", "keys/bob/rotate", {"grace_s": 60})
    assert status == 200 and second["key"] != first["key"]
    assert _chat(gateway, first["key"]) and _chat(gateway, second["key"])  # both within the grace
    _, third = admin_call(port, "POST", "keys/bob/rotate", {})  # grace 0: every older secret ends now
    for old in (first["key"], second["key"]):
        with pytest.raises(openai.AuthenticationError):
            _chat(gateway, old)
    assert _chat(gateway, third["key"])


def test_expired_key_is_refused(gateway: GatewayServer) -> None:
    status, created = admin_call(gateway.port, "POST", "keys", {"name": "temp", "expires_at": time.time() + 1})
    assert status == 201  # a past expires_at is refused (docs/keys-teams-spend.md): one that passes soon
    _until(lambda: not _works(gateway, created["key"]), deadline_s=5.0)
    with capture_logs() as logs, pytest.raises(openai.AuthenticationError) as refused:
        _chat(gateway, created["key"])
    # told apart from an unknown key, to the client and in the log line (docs/reference.md, Errors)
    assert (refused.value.status_code, refused.value.code) == (401, "expired_api_key")
    assert [e["reason"] for e in logs if e["event"] == "request"] == ["expired_api_key"]
    with pytest.raises(openai.AuthenticationError) as unknown:
        _chat(gateway, created["key"] + "x")
    assert unknown.value.code == "invalid_api_key"
    admin_call(gateway.port, "PATCH", "keys/temp", {"expires_at": None})
    assert _chat(gateway, created["key"])


def test_team_limits_apply_on_top_of_the_keys_own(gateway: GatewayServer) -> None:
    port = gateway.port
    admin_call(port, "POST", "teams", {"name": "tiny", "rpm": 2})
    keys = [admin_call(port, "POST", "keys", {"name": f"k{i}", "team": "tiny"})[1]["key"] for i in range(2)]
    assert _chat(gateway, keys[0]) and _chat(gateway, keys[1])
    with pytest.raises(openai.RateLimitError):  # each key is unlimited; the team's rpm counts both
        _chat(gateway, keys[0])
    admin_call(port, "POST", "teams", {"name": "thrifty", "budget_usd": 0.00001})
    own = admin_call(port, "POST", "keys", {"name": "spender", "team": "thrifty", "budget_usd": 100})[1]["key"]
    other = admin_call(port, "POST", "keys", {"name": "sibling", "team": "thrifty"})[1]["key"]
    assert _chat(gateway, own)  # spends more than the team's whole budget
    with pytest.raises(openai.RateLimitError) as refused:  # the sibling's own budget is unlimited
        _chat(gateway, other)
    assert refused.value.code == "budget_exceeded"


def test_admin_errors_are_openai_shaped(gateway: GatewayServer) -> None:
    port = gateway.port
    _, created = admin_call(port, "POST", "keys", {"name": "carol"})
    for key in ("wrong", created["key"], CONFIG_KEY):  # a gateway key is never an admin key
        status, body = admin_call(port, "GET", "keys", key=key)
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):  # and an admin key is never a gateway key
        _chat(gateway, ADMIN_KEY)
    assert admin_call(port, "POST", "keys", {"name": "carol"})[0] == 409
    assert admin_call(port, "POST", "keys", {"name": "from-config"})[0] == 409  # names unique with the config's
    status, body = admin_call(port, "GET", "keys/nobody")
    assert status == 404 and set(body["error"]) == {"message", "type", "param", "code"}
    for bad, param in (({"name": "x", "rpm": -1}, "rpm"), ({"name": "x", "models": ["nope"]}, "models"),
                       ({"name": "x", "team": "ghosts"}, "team"), ({"name": "x", "colour": 1}, "colour"),
                       ({"name": "bad name"}, "name")):
        status, body = admin_call(port, "POST", "keys", bad)
        assert (status, body["error"]["param"]) == (400, param), body
    assert admin_call(port, "GET", "spend?group_by=colour")[0] == 400
    assert admin_call(port, "GET", "spend?from=2024-13-01")[0] == 400
    assert admin_call(port, "DELETE", "teams/none")[0] == 404


def test_two_gateways_on_one_sqlite_file_follow_each_others_changes_by_the_version_poll(
        servers: LoopThread, tmp_path: Path) -> None:
    config = store_config(f"sqlite:///{tmp_path}/shared.db", poll_s=0.2)
    a, b = GatewayServer(config), GatewayServer(config)
    servers.run(a.start())
    servers.run(b.start())
    try:
        _, created = admin_call(a.port, "POST", "keys", {"name": "shared"})
        _until(lambda: _works(b, created["key"]))
        admin_call(a.port, "DELETE", "keys/shared")
        _until(lambda: not _works(b, created["key"]))
    finally:
        servers.run(a.stop())
        servers.run(b.stop())


def _works(gw: GatewayServer, key: str) -> bool:
    try:
        return bool(_chat(gw, key))
    except openai.AuthenticationError:
        return False


def _until(cond: Callable[[], bool], deadline_s: float = 2.0) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < end, f"not within {deadline_s} s"
        time.sleep(0.01)  # polling another replica's state against a deadline
