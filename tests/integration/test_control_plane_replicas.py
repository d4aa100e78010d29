"""The control plane across processes and failures: two gateways on one PostgreSQL (a key revoked through
one is refused by the other within 2 s), a gateway killed with SIGKILL in the middle of 500 requests (the
ledger holds every request whose last byte the client received, none twice), and PostgreSQL stopped under
load (inference goes on from the cache, admin writes answer 503, and work again once it is back)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import httpx2 as httpx
import openai
import psycopg
import pytest

from gateway.config import parse_config
from gateway.store import Store
from tests.control_plane import ADMIN_KEY, GatewayProcess, admin_call, raw_config, store_config, two_replicas
from tests.harness import GatewayServer, LoopThread
from tests.postgres_server import PostgresServer


def _status(base_url: str, key: str) -> int:
    r = httpx.post(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    return r.status_code


def _within(deadline_s: float, cond: object) -> float:
    """Seconds until `cond()` held, polled; fails at the deadline."""
    t0 = time.monotonic()
    while not cond():  # type: ignore[operator]
        assert time.monotonic() - t0 < deadline_s, f"not within {deadline_s} s"
        time.sleep(0.01)  # polling another process's state against a deadline
    return time.monotonic() - t0


def test_a_key_revoked_through_one_gateway_is_refused_by_the_other_within_2s(
        postgres: PostgresServer, tmp_path: Path) -> None:
    with two_replicas(tmp_path, raw_config(postgres.new_database(), poll_s=0.5)) as (a, b):
        status, created = admin_call(a.port, "POST", "keys", {"name": "leaked"})
        assert status == 201
        _within(2.0, lambda: _status(b.base_url, created["key"]) == 200)
        assert admin_call(a.port, "DELETE", "keys/leaked")[0] == 200
        took = _within(2.0, lambda: _status(b.base_url, created["key"]) == 401)
        print(f"revocation reached the other gateway in {took * 1000:.0f} ms")


async def _stream(client: httpx.AsyncClient, key: str, rid: str) -> bool:
    """True when the client read the stream to its last byte (`data: [DONE]`)."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with client.stream("POST", "/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {key}", "x-request-id": rid}) as resp:
        if resp.status_code != 200:
            return False
        last = ""
        async for line in resp.aiter_lines():
            if line:
                last = line
        return last == "data: [DONE]"


def _kill_9_under_load(gw: GatewayProcess) -> tuple[set[str], set[str]]:
    """500 streamed requests, 8 at a time, the gateway killed with SIGKILL after the 200th is read to
    its end: (received to the last byte, started)."""
    _, created = admin_call(gw.port, "POST", "keys", {"name": "load"})
    received: set[str] = set()
    started: set[str] = set()
    concurrency, kill_after = 8, 200

    async def worker(ids: list[str], client: httpx.AsyncClient) -> None:
        while ids and gw.proc is not None and gw.proc.poll() is None:
            rid = ids.pop()
            started.add(rid)
            try:
                if await _stream(client, created["key"], rid):
                    received.add(rid)
            except httpx.HTTPError:
                continue
            if len(received) >= kill_after and gw.proc.poll() is None:
                gw.kill()  # SIGKILL, with the other workers' streams in flight

    async def load() -> None:
        ids = [f"kill-{i:03d}" for i in range(500)][::-1]
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=20) as client:
            await asyncio.gather(*(worker(ids, client) for _ in range(concurrency)))

    asyncio.run(load())
    assert gw.proc is not None and gw.proc.returncode == -9
    assert len(received) >= kill_after
    return received, started


_KILLED = "SELECT request_id FROM gw_spend WHERE request_id LIKE 'kill-%'"


@pytest.mark.parametrize("where", ["sqlite", "sqlite-journal-off", "postgresql", "postgresql-journal"])
def test_kill_9_in_the_middle_of_500_requests_loses_and_doubles_no_ledger_row(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """SQLite journals each row beside its file (auto), or commits it first (off); PostgreSQL commits it
    first, or journals it in a directory of the replica's (`ledger_journal`)."""
    journal = tmp_path / "journal"
    if where.startswith("sqlite"):
        db = tmp_path / "gateway.db"
        url = f"sqlite:///{db}"
        journal = Path(f"{db}.ledger")
        store = {"ledger_journal": "off"} if where.endswith("off") else {}

        def ledger() -> list[str]:
            with sqlite3.connect(db) as conn:
                return [r[0] for r in conn.execute(_KILLED)]
    else:
        url = request.getfixturevalue("postgres").new_database()
        store = {"ledger_journal": str(journal)} if where.endswith("journal") else {}

        def ledger() -> list[str]:
            with psycopg.connect(url) as conn:
                return [r[0] for r in conn.execute(_KILLED)]
    gw = GatewayProcess(tmp_path, raw_config(url, **store))
    gw.start()
    received, started = _kill_9_under_load(gw)
    before = len(ledger())  # journaled rows since the last commit are not in the table yet
    gw.start()  # the restart commits the killed process's journal before it serves
    try:
        rows = ledger()
    finally:
        gw.stop()
    in_flight = started - received
    extra = set(rows) - received
    print(f"{where}: received {len(received)}, ledger {len(rows)} ({len(rows) - before} from the journal), "
          f"in flight at the kill {len(in_flight)}, in the ledger but cut before the last byte {len(extra)}")
    assert len(rows) == len(set(rows)), "a request is in the ledger twice"
    assert received <= set(rows), f"lost: {sorted(received - set(rows))[:5]}"
    # A row is journaled (or committed) before its last byte leaves: a kill between the two leaves a row
    # whose last byte never arrived. Only a request in flight at the kill can be one.
    assert extra <= in_flight and len(extra) <= 8
    if store.get("ledger_journal") == "off" or (where.startswith("postgresql") and not store):
        assert not journal.exists() or list(journal.iterdir()) == []
    else:  # replayed, and the graceful stop committed its own
        assert journal.is_dir() and list(journal.iterdir()) == []


def test_postgres_stopped_under_load(servers: LoopThread, postgres: PostgresServer) -> None:
    gw = GatewayServer(store_config(postgres.new_database()))
    servers.run(gw.start())
    try:
        _, created = admin_call(gw.port, "POST", "keys", {"name": "busy"})
        client = openai.OpenAI(base_url=gw.base_url, api_key=created["key"], max_retries=0)
        errors: list[BaseException] = []
        done = [0]
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                try:
                    for _ in client.chat.completions.create(model="m", stream=True,
                                                            messages=[{"role": "user", "content": "hi"}]):
                        pass
                    done[0] += 1
                except Exception as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        _within(10, lambda: done[0] >= 20)
        postgres.stop()
        try:
            _within(5, lambda: gw.sample("llm_gateway_store_up") == 0)
            during = done[0]
            _within(10, lambda: done[0] >= during + 50)  # inference goes on from the cache
            status, body = admin_call(gw.port, "POST", "keys", {"name": "during-outage"})
            assert status == 503 and body["error"]["code"] == "store_unavailable"
        finally:
            postgres.start()
        _within(15, lambda: admin_call(gw.port, "POST", "keys", {"name": "after"})[0] == 201)
        _within(5, lambda: gw.sample("llm_gateway_store_up") == 1)
        stop.set()
        for t in threads:
            t.join(10)
        assert errors == []
        assert gw.sample("llm_gateway_store_errors_total") > 0
        spend = lambda: admin_call(gw.port, "GET", "spend?group_by=key")[1]["data"]  # noqa: E731
        _within(5, lambda: [r["requests"] for r in spend() if r["key"] == "busy"] == [done[0]])
    finally:
        servers.run(gw.stop())
    assert ADMIN_KEY  # the admin key was used throughout


def test_replicas_starting_together_apply_each_migration_once(postgres: PostgresServer) -> None:
    url = postgres.new_database()

    async def both() -> list[list[int]]:
        stores = [await Store.open(url) for _ in range(3)]
        try:
            return list(await asyncio.gather(*(s.migrate() for s in stores)))
        finally:
            for s in stores:
                await s.close()

    assert sorted(asyncio.run(both())) == [[], [], [1, 2, 3, 4]]


def test_admin_credentials_with_the_store_down_answer_503(servers: LoopThread, postgres: PostgresServer) -> None:
    """Stored admin keys are read from the store on each request: with it down, a credential that is not a
    config admin key cannot be told apart, so the answer is the outage's 503 (not a dropped connection,
    nor a 404 saying the control plane is off when stored admin keys alone turn it on)."""
    url = postgres.new_database()
    raw = raw_config(url)
    with_config_key = GatewayServer(parse_config(raw, env={}))
    del raw["admin"]
    stored_only = GatewayServer(parse_config(raw, env={}))  # on by its stored admin keys only
    servers.run(with_config_key.start())
    servers.run(stored_only.start())
    try:
        status, made = admin_call(with_config_key.port, "POST", "admin-keys", {"name": "ops", "role": "viewer"})
        assert status == 201
        assert admin_call(stored_only.port, "GET", "me", key=made["key"])[0] == 200
        postgres.stop()
        try:
            for port, key in ((with_config_key.port, made["key"]), (with_config_key.port, "sk-gw-admin-not-one"),
                              (stored_only.port, made["key"])):
                status, body = admin_call(port, "GET", "me", key=key)
                assert (status, body["error"]["code"]) == (503, "store_unavailable"), (port, key, body)
            # no admin key the store could hold has another form: refused without asking the store
            status, body = admin_call(with_config_key.port, "GET", "me", key="sk-not-an-admin-key")
            assert (status, body["error"]["code"]) == (401, "invalid_api_key"), body
            assert admin_call(with_config_key.port, "GET", "me")[0] == 200  # a config admin key needs no store
        finally:
            postgres.start()
        _within(15, lambda: admin_call(stored_only.port, "GET", "me", key=made["key"])[0] == 200)
    finally:
        servers.run(with_config_key.stop())
        servers.run(stored_only.stop())
