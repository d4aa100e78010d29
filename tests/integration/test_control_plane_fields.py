"""The control plane's writes are validated against what every read can hold, on a real SQLite file and a
real PostgreSQL server: every field of keys and teams, create and PATCH, fuzzed with out-of-range and
wrong-type values (Hypothesis) never gets a 5xx or a dropped connection, and every stored row is returned
by the list. Also: the cases of the security review one by one, paginated lists, strict spend dates, a
reused key name that starts with no spend and none of its predecessor's cached answers, and CORS that
never reaches `/admin/`."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.admin_cli import all_pages
from gateway.config import parse_config
from tests.control_plane import ADMIN_KEY, admin_call, raw_config
from tests.harness import GatewayServer, LoopThread


def _start(servers: LoopThread, raw: dict[str, Any]) -> Iterator[GatewayServer]:
    gw = GatewayServer(parse_config(raw, env={}))
    servers.run(gw.start())
    yield gw
    servers.run(gw.stop())


@pytest.fixture
def gateway(servers: LoopThread, store_url: str) -> Iterator[GatewayServer]:
    yield from _start(servers, raw_config(store_url))


def _stored_names(store_url: str, table: str) -> list[str]:
    if store_url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(store_url.removeprefix("sqlite://")) as conn:
            return sorted(r[0] for r in conn.execute(f"SELECT name FROM {table}"))
    with psycopg.connect(store_url) as conn:
        return sorted(r[0] for r in conn.execute(f"SELECT name FROM {table}"))  # type: ignore[arg-type]


def _listed(port: int, what: str, page_size: int = 1000) -> list[str]:
    def call(url: str) -> Any:
        status, body = admin_call(port, "GET", url.removeprefix("/admin/v1/"))
        assert status == 200, body
        return body

    return [row["name"] for row in all_pages(call, f"/admin/v1/{what}", page_size)["data"]]


# -- fuzzing every field --------------------------------------------------------------------------

_NOW = time.time()
EDGES = st.sampled_from([
    0, 1, -1, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 1e20, -1e20, 1e308, 0.5, -0.0,
    _NOW * 1000, _NOW - 1, _NOW + 60, _NOW + 101 * 365.25 * 86400,
    "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-1-1", "2126-01-01",
    "2030-01-01T00:00:00+14:00", "x" * 70, "alice\n", "\nalice", "al ice", "ali:ce", "é", "\u0000", "",
    "m", "other", "nope", ["m"], ["m", "other"], ["nope"], [1], [None], "day", "month", "week",
    {"a": {"b": {"c": [1, 2, {"d": None}]}}}, {"\u0000": "\u0000"}, {"big": 2**64 - 1}, [], {},
])
VALUES = st.one_of(
    EDGES, st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=_NOW + 5, max_value=_NOW + 3e9),
    st.text(max_size=70), st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True),
    st.lists(st.sampled_from(["m", "other", "x", ""]), max_size=4),
    st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8)), max_size=4),
)
KEY_FIELDS = ("name", "team", "expires_at", "metadata", "models", "rpm", "tpm", "budget_usd", "budget_period")
TEAM_FIELDS = ("name", "models", "rpm", "tpm", "budget_usd", "budget_period")
OPERATIONS = st.sampled_from([("POST", "keys", KEY_FIELDS), ("PATCH", "keys/fuzz-key", KEY_FIELDS[1:]),
                              ("POST", "teams", TEAM_FIELDS), ("PATCH", "teams/fuzz-team", TEAM_FIELDS[1:])])


VALID: dict[str, st.SearchStrategy[Any]] = {
    "name": st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True),
    "team": st.sampled_from([None, "fuzz-team"]),
    "expires_at": st.one_of(st.none(), st.floats(min_value=_NOW + 60, max_value=_NOW + 3e9),
                            st.datetimes(min_value=datetime(2030, 1, 1), max_value=datetime(2120, 1, 1))
                            .map(lambda d: d.isoformat() + "Z")),
    "metadata": st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)),
    "models": st.one_of(st.none(), st.lists(st.sampled_from(["m", "other"]), max_size=3)),
    "rpm": st.one_of(st.none(), st.integers(1, 2**53)), "tpm": st.one_of(st.none(), st.integers(1, 2**53)),
    "budget_usd": st.one_of(st.none(), st.floats(min_value=0, max_value=2**53)),
    "budget_period": st.sampled_from(["day", "month"]),
}


@st.composite
def admin_writes(draw: st.DrawFn) -> tuple[str, str, Any]:
    """A valid body with up to two of its fields replaced by anything (or, now and then, no object)."""
    method, path, fields = draw(OPERATIONS)
    required = {"name": VALID["name"]} if method == "POST" else {}
    body: Any = draw(st.fixed_dictionaries(required, optional={f: VALID[f] for f in fields if f != "name"}))
    for field in draw(st.lists(st.sampled_from(fields), max_size=2, unique=True)):
        body[field] = draw(VALUES)
    if draw(st.integers(0, 20)) == 0:
        body = draw(VALUES)
    return method, path, body


def test_every_field_fuzzed_is_a_clear_answer_and_every_stored_row_is_listed(
        gateway: GatewayServer, store_url: str) -> None:
    port = gateway.port
    assert admin_call(port, "POST", "teams", {"name": "fuzz-team"})[0] == 201
    assert admin_call(port, "POST", "keys", {"name": "fuzz-key", "team": "fuzz-team"})[0] == 201
    seen: dict[int, int] = {}

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(admin_writes())
    def write(call: tuple[str, str, Any]) -> None:
        method, path, body = call
        status, answer = admin_call(port, method, path, body)  # a dropped connection raises here
        seen[status] = seen.get(status, 0) + 1
        assert status < 500, (call, answer)
        if status >= 400:
            assert set(answer["error"]) == {"message", "type", "param", "code"}, answer
        if status == 400 and isinstance(body, dict) and body:
            assert answer["error"]["param"] in {*body, "name"}, (call, answer)  # names the field it refuses

    write()
    print("answers by status:", seen)
    assert seen.get(400, 0) > 0 and (seen.get(200, 0) + seen.get(201, 0)) > 0
    for what, table in (("keys", "gw_keys"), ("teams", "gw_teams")):
        stored = _stored_names(store_url, table)
        assert sorted(_listed(port, what)) == stored  # every stored row can be listed ...
        for name in stored:  # ... and read
            status, row = admin_call(port, "GET", f"{what}/{urllib.request.quote(name, safe='')}")
            assert status == 200, row


# -- the review's cases, one by one ---------------------------------------------------------------

def test_values_reads_could_not_hold_are_refused_and_store_nothing(gateway: GatewayServer) -> None:
    port = gateway.port
    now = time.time()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "alice\n"}, "name"), ({"name": "x" * 65}, "name"), ({"name": "ali:ce"}, "name"),
        ({"name": "a", "expires_at": now * 1000}, "expires_at"),  # JavaScript milliseconds
        ({"name": "a", "expires_at": 1e20}, "expires_at"), ({"name": "a", "expires_at": -1e20}, "expires_at"),
        ({"name": "a", "expires_at": "0000-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "a", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),  # in the past
        ({"name": "a", "expires_at": now - 1}, "expires_at"),
        ({"name": "a", "expires_at": now + 101 * 365.25 * 86400}, "expires_at"),
        ({"name": "a", "rpm": 2**63}, "rpm"), ({"name": "a", "tpm": 2**53 + 1}, "tpm"),
        ({"name": "a", "budget_usd": 1e300}, "budget_usd"), ({"name": "a", "metadata": _nested(40)}, "metadata"),
    ]
    for body, param in cases:
        status, answer = admin_call(port, "POST", "keys", body)
        assert (status, answer["error"]["param"]) == (400, param), (body, answer)
    assert admin_call(port, "GET", "keys")[1]["data"] == []  # nothing was stored
    status, created = admin_call(port, "POST", "keys", {"name": "a", "rpm": 2**53, "expires_at": now + 3600})
    assert status == 201 and created["rpm"] == 2**53  # the name was never taken by a failed create
    assert admin_call(port, "POST", "keys", {"name": "alice"})[0] == 201
    assert admin_call(port, "PATCH", "keys/alice", {"expires_at": now - 10})[0] == 400
    assert [k["name"] for k in admin_call(port, "GET", "keys")[1]["data"]] == ["a", "alice"]


def test_dot_segment_names_are_refused(gateway: GatewayServer) -> None:
    """`.` and `..` are a URL's dot segments: a browser sends `DELETE /admin/v1/keys/..` as `DELETE
    /admin/v1/`, so a key, team or admin key so named could never be revoked from the console (a team
    admin could make one its admin cannot remove there). Refused as names; `...` is a name like any."""
    port = gateway.port
    assert admin_call(port, "POST", "teams", {"name": "t"})[0] == 201
    for name in (".", ".."):
        for path, body in (("keys", {"name": name}), ("teams", {"name": name}),
                           ("admin-keys", {"name": name, "role": "viewer"}), ("keys", {"name": "k", "team": name})):
            status, answer = admin_call(port, "POST", path, body)
            assert (status, answer["error"]["param"]) == (400, "team" if "team" in body else "name"), (path, body)
    assert admin_call(port, "POST", "keys", {"name": "...", "team": "t"})[0] == 201
    assert [k["name"] for k in admin_call(port, "GET", "keys")[1]["data"]] == ["..."]
    assert [t["name"] for t in admin_call(port, "GET", "teams")[1]["data"]] == ["t"]


def _nested(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(depth):
        out = {"x": out}
    return out


def test_a_nul_in_a_name_is_no_store_outage(gateway: GatewayServer) -> None:
    """No name holds a NUL: PostgreSQL's text cannot, and its driver's refusal read as the store down (503
    `store_unavailable`, a store error counted, the connection dropped) for any caller with a name in its
    path, a team admin's included. A NUL names nothing (404), and is no page's `after` (400)."""
    port = gateway.port
    assert admin_call(port, "POST", "teams", {"name": "t"})[0] == 201
    assert admin_call(port, "POST", "keys", {"name": "a", "team": "t"})[0] == 201
    for method, path in (("GET", "keys/a%00"), ("PATCH", "keys/a%00"), ("DELETE", "keys/a%00"),
                         ("POST", "keys/a%00/rotate"), ("GET", "teams/t%00"), ("DELETE", "admin-keys/%00")):
        status, body = admin_call(port, method, path, {} if method in ("PATCH", "POST") else None)
        assert (status, body["error"]["code"]) == (404, "not_found"), (method, path, body)
    for what in ("keys", "teams", "admin-keys"):
        status, body = admin_call(port, "GET", f"{what}?after=a%00")
        assert (status, body["error"]["param"]) == (400, "after"), (what, body)
    assert gateway.sample("llm_gateway_store_errors_total") == 0
    assert [k["name"] for k in admin_call(port, "GET", "keys")[1]["data"]] == ["a"]


def test_spend_dates_are_strict(gateway: GatewayServer) -> None:
    port = gateway.port
    for query, param in (("from=2026-1-1", "from"), ("to=2026-01-1", "to"), ("from=2026-02-30", "from"),
                         ("from=%EF%BC%92026-01-01", "from"), ("from=2026-02-01&to=2026-01-31", "from")):
        status, body = admin_call(port, "GET", f"spend?group_by=key&{query}")
        assert (status, body["error"]["param"]) == (400, param), (query, body)
    status, body = admin_call(port, "GET", "spend?group_by=key&from=2026-01-31&to=2026-01-31")
    assert status == 200 and body["data"] == []


def test_lists_are_paginated(gateway: GatewayServer) -> None:
    port = gateway.port
    names = [f"k{i:02d}" for i in range(12)]
    for name in names:
        assert admin_call(port, "POST", "keys", {"name": name})[0] == 201
    pages, after = [], ""
    while True:
        status, page = admin_call(port, "GET", f"keys?limit=5{after}")
        assert status == 200
        pages.append([k["name"] for k in page["data"]])
        if not page["has_more"]:
            break
        after = f"&after={page['data'][-1]['name']}"
    assert pages == [names[:5], names[5:10], names[10:]]
    assert _listed(port, "keys", page_size=5) == names  # `gateway admin keys list` pages through them all
    assert admin_call(port, "GET", "keys")[1]["has_more"] is False  # default: 100 a page
    assert admin_call(port, "GET", "keys?limit=1000")[0] == 200
    for bad in ("1001", "0", "-1", "abc", "1e3", ""):
        status, body = admin_call(port, "GET", f"keys?limit={bad}")
        assert (status, body["error"]["param"]) == (400, "limit"), bad
    status, teams = admin_call(port, "GET", "teams?limit=1")
    assert status == 200 and teams["has_more"] is False and teams["data"] == []
    status, audit = admin_call(port, "GET", "audit?limit=4")
    assert status == 200 and audit["has_more"] is True and len(audit["data"]) == 4
    status, older = admin_call(port, "GET", f"audit?limit=100&after={audit['data'][-1]['id']}")
    assert [a["name"] for a in audit["data"] + older["data"]] == names[::-1] and older["has_more"] is False
    assert admin_call(port, "GET", "audit?after=k05")[0] == 400


def _gateway_spend(gw: GatewayServer, key: str) -> float:
    r = httpx.get(f"{gw.base_url}/gateway/spend", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert r.status_code == 200, r.text
    return float(r.json()["spend_usd"])


def _chat(gw: GatewayServer, key: str) -> None:
    openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}])


def test_a_reused_name_starts_with_no_spend(gateway: GatewayServer) -> None:
    port = gateway.port
    first = admin_call(port, "POST", "keys", {"name": "alice", "budget_usd": 0.000001})[1]
    _chat(gateway, first["key"])  # spends more than the budget: the next is refused
    with pytest.raises(openai.RateLimitError):
        _chat(gateway, first["key"])
    assert _gateway_spend(gateway, first["key"]) > 0
    assert admin_call(port, "DELETE", "keys/alice")[0] == 200
    second = admin_call(port, "POST", "keys", {"name": "alice", "budget_usd": 0.000001})[1]
    assert second["id"] != first["id"]
    assert _gateway_spend(gateway, second["key"]) == 0  # the revoked key's spend is not the new one's
    status, spend = admin_call(port, "GET", "spend?group_by=key")
    assert status == 200 and [(r["key"], r["key_id"]) for r in spend["data"]] == [("alice", first["id"])]
    _chat(gateway, second["key"])  # its budget is whole
    status, spend = admin_call(port, "GET", "spend?group_by=key")
    assert {r["key_id"]: r["requests"] for r in spend["data"]} == {first["id"]: 2, second["id"]: 1}  # 200, 429; 200


def test_a_reused_name_reads_none_of_its_predecessors_cached_answers(gateway: GatewayServer) -> None:
    """The response cache is keyed by the key's id, as its spend is: a new key under a revoked key's name
    is not served the answers the revoked one cached."""
    def cached(key: str) -> str | None:
        raw = openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0).chat.completions.with_raw_response
        answer = raw.create(model="m", messages=[{"role": "user", "content": "hi"}],
                            extra_headers={"x-gateway-cache": "on"})
        return answer.headers.get("x-gateway-cache")

    first = admin_call(gateway.port, "POST", "keys", {"name": "alice"})[1]["key"]
    assert (cached(first), cached(first)) == (None, "hit")
    assert admin_call(gateway.port, "DELETE", "keys/alice")[0] == 200
    second = admin_call(gateway.port, "POST", "keys", {"name": "alice"})[1]["key"]
    assert cached(second) is None, "the revoked key's answer is not the new key's"
    assert cached(second) == "hit"


def test_cors_never_applies_to_the_control_plane(servers: LoopThread, tmp_path: Path) -> None:
    raw = raw_config(f"sqlite:///{tmp_path}/cors.db")
    raw["server"]["cors"] = {"allow_origins": ["*"]}
    for gw in _start(servers, raw):
        origin = {"Origin": "https://evil.example.com"}
        api = httpx.get(f"{gw.base_url}/models", headers={**origin, "Authorization": "Bearer sk-config-key-"
                                                                                      + "c" * 20})
        assert api.headers.get("access-control-allow-origin") == "https://evil.example.com"  # the API: as set
        admin = httpx.get(f"http://127.0.0.1:{gw.port}/admin/v1/keys",
                          headers={**origin, "Authorization": f"Bearer {ADMIN_KEY}"})
        assert admin.status_code == 200 and "access-control-allow-origin" not in admin.headers
        preflight = httpx.options(f"http://127.0.0.1:{gw.port}/admin/v1/keys",
                                  headers={**origin, "Access-Control-Request-Method": "GET",
                                           "Access-Control-Request-Headers": "authorization"})
        assert not any(h.startswith("access-control-") for h in preflight.headers), preflight.headers
        json.loads(admin.text)
