"""Rows the gateway cannot read, written by hand into the store two gateway processes share (SQLite file
and PostgreSQL): bad JSON, wrong types, NULLs where a value is required, out-of-range numbers and unknown
enum values in every column of keys, teams and secrets. Every other key keeps syncing on both replicas
(a revocation within 2 s), each bad row is logged and counted once per change of it (not once per poll),
the lists and the sync survive them, and a poll that fails for any other reason is reported and retried."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest

from tests.control_plane import GatewayProcess, admin_call, raw_config, two_replicas

KEY_COLS = ("name", "team", "models", "rpm", "tpm", "budget_usd", "budget_period", "expires_at", "metadata",
            "created_at", "id")
TEAM_COLS = ("name", "models", "rpm", "tpm", "budget_usd", "budget_period", "created_at")
BOTH: dict[str, dict[str, Any]] = {  # key name -> the columns that make it unreadable
    "bad-json": {"models": "m1"},
    "models-object": {"models": '{"m": 1}'},
    "models-of-numbers": {"models": "[1, 2]"},
    "rpm-huge": {"rpm": 2**62},
    "tpm-negative": {"tpm": -5},
    "budget-negative": {"budget_usd": -1.0},
    "period-week": {"budget_period": "week"},
    "expires-1e20": {"expires_at": 1e20},
    "expires-minus-1e20": {"expires_at": -1e20},
    "metadata-text": {"metadata": "not json"},
    "metadata-list": {"metadata": "[1]"},
    "created-1e300": {"created_at": 1e300},
}
ONLY = {
    "sqlite": {  # SQLite keeps any value in any column, and NULL in a TEXT PRIMARY KEY
        "rpm-text": {"rpm": "many"}, "tpm-float": {"tpm": 1.5}, "budget-text": {"budget_usd": "lots"},
        "created-text": {"created_at": "yesterday"}, "team-blob": {"team": b"\x00\x01"},
        "id-blob": {"id": b"\x01"}, None: {},
    },
    "postgresql": {  # a column an older version left nullable
        "budget-nan": {"budget_usd": float("nan")}, "expires-inf": {"expires_at": float("inf")},
        "metadata-null": {"metadata": None},
    },
}


class Database:
    """The store's database, written by hand as an operator (or an older version) would."""

    def __init__(self, url: str):
        self.url = url

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        if self.url.startswith("sqlite:///"):
            with sqlite3.connect(self.url.removeprefix("sqlite://"), isolation_level=None) as conn:
                conn.execute(sql, params)
        else:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]  # built from literals

    def insert(self, table: str, cols: tuple[str, ...], row: dict[str, Any]) -> None:
        self.run(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                 tuple(row[c] for c in cols))

    def changed(self) -> None:
        """What an admin write does beside its row: move the version every replica polls."""
        self.run("UPDATE gw_meta SET version = version + 1 WHERE id = 1")


@pytest.fixture
def replicas(store_url: str, tmp_path: Path) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    with two_replicas(tmp_path, raw_config(store_url, poll_s=0.5)) as pair:
        yield pair


def _status(gw: GatewayProcess, key: str) -> int:
    r = httpx.post(f"{gw.base_url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    return r.status_code


def _within(deadline_s: float, cond: Callable[[], bool]) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < end, f"not within {deadline_s} s"
        time.sleep(0.02)  # polling other processes' state against a deadline


def _skipped_lines(gw: GatewayProcess) -> list[str]:
    return [line for line in gw.log_path.read_text().splitlines() if '"store_row_skipped"' in line]


def _metric(gw: GatewayProcess, name: str, labels: str = "") -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{gw.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    pattern = "^" + re.escape(name) + (r"\{" + labels + r"[^}]*\}" if labels else r"(\{[^}]*\})?") + r" ([0-9.e+]+)"
    found = re.search(pattern, text, re.MULTILINE)
    assert found, f"{name} {labels} is not exported"
    return float(found.groups()[-1])


def _bad_rows(db: Database, dialect: str) -> int:
    """Writes every kind of unreadable row by hand; how many were written."""
    now = time.time()
    if dialect == "postgresql":
        db.run("ALTER TABLE gw_keys ALTER COLUMN metadata DROP NOT NULL")
    keys = {**BOTH, **ONLY[dialect]}
    for name, bad in keys.items():
        db.insert("gw_keys", KEY_COLS, {"name": name, "team": None, "models": None, "rpm": None, "tpm": None,
                                        "budget_usd": None, "budget_period": "day", "expires_at": None,
                                        "metadata": "{}", "created_at": now, "id": f"hand-{name}", **bad})
        if name is not None:  # its secret is valid: the key must still be refused, its row unreadable
            db.run("INSERT INTO gw_key_secrets (digest, key_name, created_at) VALUES (?, ?, ?)",
                   (hashlib.sha256(f"sk-hand-{name}".encode()).hexdigest(), name, now))
    teams = {"team-json": {"models": "x"}, "team-year": {"budget_period": "year"}, "team-rpm": {"rpm": -1}}
    for name, bad in teams.items():
        db.insert("gw_teams", TEAM_COLS, {"name": name, "models": None, "rpm": None, "tpm": None,
                                          "budget_usd": None, "budget_period": "day", "created_at": now, **bad})
    secrets = [("not-hex", "good", now, None), ("a" * 64, "good", now, 1e300)]
    if dialect == "sqlite":
        secrets += [("b" * 64, b"\xff", now, None), ("c" * 64, "good", now, "soon")]
    for row in secrets:
        db.run("INSERT INTO gw_key_secrets (digest, key_name, created_at, expires_at) VALUES (?, ?, ?, ?)", row)
    db.changed()
    return len(keys) + len(teams) + len(secrets)


def test_unreadable_rows_are_skipped_once_and_every_other_key_keeps_syncing(
        replicas: tuple[GatewayProcess, GatewayProcess], store_url: str) -> None:
    a, b = replicas
    db, dialect = Database(store_url), "sqlite" if store_url.startswith("sqlite") else "postgresql"
    assert admin_call(a.port, "POST", "teams", {"name": "good-team"})[0] == 201
    good = admin_call(a.port, "POST", "keys", {"name": "good", "team": "good-team"})[1]["key"]
    victim = admin_call(a.port, "POST", "keys", {"name": "victim"})[1]["key"]
    bad = _bad_rows(db, dialect)

    for gw in (a, b):  # each replica reads the bad rows once, and keeps serving the good keys
        _within(2.0, lambda gw=gw: len(_skipped_lines(gw)) == bad)  # type: ignore[misc]
        assert _status(gw, good) == 200 and _status(gw, victim) == 200
        assert _status(gw, "sk-hand-bad-json") == 401  # an unreadable key is never served
    # later writes (each moves the version: a new snapshot on both) still reach both within 2 s
    assert admin_call(a.port, "DELETE", "keys/victim")[0] == 200
    fresh = admin_call(b.port, "POST", "keys", {"name": "fresh"})[1]["key"]
    for gw in (a, b):
        _within(2.0, lambda gw=gw: _status(gw, victim) == 401 and _status(gw, fresh) == 200)  # type: ignore[misc]
        # ... and the bad rows, unchanged, are neither logged nor counted again
        assert len(_skipped_lines(gw)) == bad
        assert _metric(gw, "llm_gateway_store_errors_total", 'op="refresh"') == bad
        assert _metric(gw, "llm_gateway_store_up") == 1
    line = next(s for s in _skipped_lines(a) if '"bad-json"' in s)
    assert '"column":"models"' in line and '"table":"gw_keys"' in line

    db.run("UPDATE gw_keys SET models = ? WHERE name = ?", ("still not json", "bad-json"))  # a change: once more
    db.changed()
    for gw in (a, b):
        _within(2.0, lambda gw=gw: len(_skipped_lines(gw)) == bad + 1)  # type: ignore[misc]

    # the admin API lists what it can read and says which row it cannot; the bad row can be deleted
    status, listed = admin_call(a.port, "GET", "keys")
    assert status == 200 and [k["name"] for k in listed["data"]] == ["fresh", "good"]
    status, teams = admin_call(a.port, "GET", "teams")
    assert status == 200 and [t["name"] for t in teams["data"]] == ["good-team"]
    status, body = admin_call(a.port, "GET", "keys/bad-json")
    assert status == 500 and body["error"]["code"] == "store_row_unreadable" and "models" in body["error"]["message"]
    assert admin_call(a.port, "DELETE", "keys/bad-json")[0] == 200


def test_a_poll_that_fails_for_any_reason_is_reported_and_retried(
        replicas: tuple[GatewayProcess, GatewayProcess], store_url: str) -> None:
    a, b = replicas
    db = Database(store_url)
    victim = admin_call(a.port, "POST", "keys", {"name": "victim"})[1]["key"]
    _within(2.0, lambda: _status(b, victim) == 200)
    db.run("DELETE FROM gw_meta")  # the version row gone: no store error explains it
    for gw in (a, b):
        _within(3.0, lambda gw=gw: '"store_sync_failed"' in gw.log_path.read_text())  # type: ignore[misc]
        _within(3.0, lambda gw=gw: _metric(gw, "llm_gateway_store_up") == 0)  # type: ignore[misc]
        assert _status(gw, victim) == 200  # served from the cache meanwhile
    db.run("INSERT INTO gw_meta (id, version) VALUES (1, 1000)")
    db.run("DELETE FROM gw_keys WHERE name = 'victim'")  # a revocation by hand: the next poll sees it
    db.changed()
    for gw in (a, b):
        _within(2.0, lambda gw=gw: _status(gw, victim) == 401)  # type: ignore[misc]
        _within(2.0, lambda gw=gw: _metric(gw, "llm_gateway_store_up") == 1)  # type: ignore[misc]
