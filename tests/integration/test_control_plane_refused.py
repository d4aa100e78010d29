"""A value the database itself refuses, by a limit of its own the admin API cannot know (a column an
operator narrowed, a constraint they added, a character outside a LATIN1 database's encoding), on a real
SQLite file and a real PostgreSQL server: `400 store_refused` in the admin API's error shape, nothing
stored, the store not counted as down. It answered `503 store_unavailable` on PostgreSQL (a store error
counted, the connection dropped; `500` for the encoding) and `409 conflict` ("the name is taken") on
SQLite. A taken name stays `409 conflict`.

The schema's own columns have no length limit (TEXT) and every field is validated before the write
(`test_control_plane_fields.py`), so no request reaches such a refusal on a UTF-8 database the gateway
migrated itself."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tests.control_plane import admin_call, store_config
from tests.harness import GatewayServer, LoopThread
from tests.postgres_server import PostgresServer

LIMIT, MAX_RPM = 64, 1000  # the operator's own limits: characters of a key's metadata, its rpm


@contextmanager
def _running(servers: LoopThread, store_url: str) -> Iterator[GatewayServer]:
    gw = GatewayServer(store_config(store_url))
    servers.run(gw.start())
    try:
        yield gw
    finally:
        servers.run(gw.stop())


@pytest.fixture
def gateway(servers: LoopThread, store_url: str) -> Iterator[GatewayServer]:
    with _running(servers, store_url) as gw:
        yield gw


def _narrow_keys(store_url: str) -> None:
    """What an operator may do to the migrated schema: a key's metadata at most LIMIT characters and its
    rpm at most MAX_RPM. On PostgreSQL a narrower column type (over it: SQLSTATE 22001, a data exception)
    and a CHECK constraint (23514, an integrity violation); on SQLite, which stores a `varchar(64)` over
    its length happily and adds no constraint by ALTER TABLE, triggers."""
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite://")) as conn:
            for event in ("INSERT", "UPDATE"):
                conn.execute(f"CREATE TRIGGER gw_keys_limits_{event.lower()} BEFORE {event} ON gw_keys "
                             f"WHEN length(NEW.metadata) > {LIMIT} OR NEW.rpm > {MAX_RPM} "
                             "BEGIN SELECT RAISE(ABORT, 'over the limit'); END")
        return
    with psycopg.connect(store_url, autocommit=True) as pg:
        pg.execute(f"ALTER TABLE gw_keys ALTER COLUMN metadata TYPE varchar({LIMIT})")
        pg.execute(f"ALTER TABLE gw_keys ADD CONSTRAINT gw_keys_rpm CHECK (rpm <= {MAX_RPM})")


def _refused(answer: tuple[int, Any]) -> bool:
    status, body = answer
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, body
    return (status, error["type"], error["code"]) == (400, "invalid_request_error", "store_refused")


def test_a_value_over_a_limit_of_the_databases_own_is_a_400(gateway: GatewayServer, store_url: str) -> None:
    port = gateway.port
    _narrow_keys(store_url)
    over = {"note": "x" * LIMIT}
    for body in ({"name": "alice", "metadata": over}, {"name": "alice", "rpm": MAX_RPM + 1}):
        assert _refused(admin_call(port, "POST", "keys", body)), body
    assert admin_call(port, "GET", "keys/alice")[0] == 404, "nothing was stored"
    status, created = admin_call(port, "POST", "keys", {"name": "alice", "metadata": {"note": "short"}})
    assert status == 201, created
    for change in ({"metadata": over}, {"rpm": MAX_RPM + 1}):
        assert _refused(admin_call(port, "PATCH", "keys/alice", change)), change
    stored = admin_call(port, "GET", "keys/alice")[1]
    assert (stored["metadata"], stored["rpm"]) == ({"note": "short"}, None)
    status, taken = admin_call(port, "POST", "keys", {"name": "alice"})
    assert (status, taken["error"]["code"]) == (409, "conflict")
    assert gateway.sample("llm_gateway_store_errors_total") == 0
    assert gateway.sample("llm_gateway_store_up") == 1


def test_a_character_outside_the_databases_encoding_is_a_400(servers: LoopThread, postgres: PostgresServer) -> None:
    """A database created in LATIN1 holds "Zoë" but not "日本" (the driver, which sends text in the
    database's encoding, cannot encode it). SQLite's file holds any text: there both are stored."""
    db = f"latin1_{time.monotonic_ns()}"
    with psycopg.connect(postgres.url, autocommit=True) as pg:
        pg.execute(f"CREATE DATABASE {db} ENCODING 'LATIN1' LOCALE 'C' TEMPLATE template0")  # type: ignore[arg-type]
    with _running(servers, postgres.url.rsplit("/", 1)[0] + "/" + db) as gw:
        assert admin_call(gw.port, "POST", "keys", {"name": "a", "metadata": {"owner": "Zoë"}})[0] == 201
        assert _refused(admin_call(gw.port, "POST", "keys", {"name": "b", "metadata": {"owner": "日本"}}))
        assert _refused(admin_call(gw.port, "PATCH", "keys/a", {"metadata": {"owner": "日本"}}))
        assert [k["metadata"] for k in admin_call(gw.port, "GET", "keys")[1]["data"]] == [{"owner": "Zoë"}]
        assert gw.sample("llm_gateway_store_errors_total") == 0
