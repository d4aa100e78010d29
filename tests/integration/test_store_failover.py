"""The store on a PostgreSQL primary and its streaming replica, named together in one multi-host URL
(`target_session_attrs=read-write` is the store's default); the replica is promoted under load
(docs/scale-out.md): inference never fails, admin writes work again within 5 s of the promotion, and a
gateway killed with SIGKILL during the switchover loses and doubles no ledger row."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import psycopg
import pytest

from tests.control_plane import GatewayProcess, admin_call, raw_config, running
from tests.postgres_server import PostgresServer

# times a PostgreSQL promotion under load: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

DB = "gwfailover"


@pytest.fixture
def primary() -> Iterator[PostgresServer]:
    with PostgresServer() as pg:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        yield pg


@pytest.fixture
def replica(primary: PostgresServer) -> Iterator[PostgresServer]:
    with PostgresServer(replica_of=primary) as pg:
        yield pg


def _within(deadline_s: float, cond: object, what: str) -> float:
    t0 = time.monotonic()
    while not cond():  # type: ignore[operator]
        assert time.monotonic() - t0 < deadline_s, f"{what}: not within {deadline_s} s"
        time.sleep(0.02)  # polling another process's state against a deadline
    return time.monotonic()


class Load:
    """Streams through one gateway, 4 at a time, until stopped: which request ids were read to their last
    byte, which were started, and every failure."""

    def __init__(self, gw: GatewayProcess, key: str, prefix: str) -> None:
        self.gw, self.key, self.prefix = gw, key, prefix
        self.received: set[str] = set()
        self.started: set[str] = set()
        self.failures: list[str] = []
        self.stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with httpx.AsyncClient(base_url=self.gw.base_url, timeout=20) as client:
            await asyncio.gather(*(self._worker(client, w) for w in range(4)))

    async def _worker(self, client: httpx.AsyncClient, w: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            rid = f"{self.prefix}-{w}-{n}"
            self.started.add(rid)
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            try:
                async with client.stream("POST", "/chat/completions", json=body, headers={
                        "Authorization": f"Bearer {self.key}", "x-request-id": rid}) as resp:
                    lines = [line async for line in resp.aiter_lines() if line]
                if resp.status_code == 200 and lines and lines[-1] == "data: [DONE]":
                    self.received.add(rid)
                else:
                    self.failures.append(f"{resp.status_code}")
            except httpx.HTTPError as exc:
                self.failures.append(type(exc).__name__)
                if self.gw.proc is None or self.gw.proc.poll() is not None:
                    return  # this gateway was killed: its load ends

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self._thread.join(30)


def test_promoting_the_replica_under_load(primary: PostgresServer, replica: PostgresServer, tmp_path: Path) -> None:
    # the standby first, and no target_session_attrs: the store connects to the read-write host anyway
    url = f"postgresql://gateway@127.0.0.1:{replica.port},127.0.0.1:{primary.port}/{DB}"
    a = GatewayProcess(tmp_path, raw_config(url, ledger_journal=str(tmp_path / "journal-a")), "a")
    b = GatewayProcess(tmp_path, raw_config(url, ledger_journal=str(tmp_path / "journal-b")), "b")
    with running(a, b):  # b's graceful stop at the end commits what it holds
        status, created = admin_call(b.port, "POST", "keys", {"name": "busy"})
        assert status == 201
        _within(5, lambda: admin_call(a.port, "GET", "keys/busy")[0] == 200, "the key on the other replica")
        with Load(a, created["key"], "a") as load_a, Load(b, created["key"], "b") as load_b:
            _within(20, lambda: len(load_a.received) >= 20 and len(load_b.received) >= 20, "load")
            primary.stop()  # the switchover: the primary goes away, then the replica is promoted
            a.kill()  # SIGKILL in the middle of it, with streams in flight
            in_flight_a = load_a.started - load_a.received
            replica.promote()
            promoted = time.monotonic()
            wrote = _within(15, lambda: admin_call(b.port, "POST", "keys", {"name": f"k{time.monotonic_ns()}"})[0]
                            == 201, "an admin write on the new primary")
            assert wrote - promoted <= 5.0
            during = len(load_b.received)
            _within(20, lambda: len(load_b.received) >= during + 20, "inference after the switchover")
        assert load_b.failures == [], load_b.failures[:5]
        a.start()  # replays its journal into the new primary before serving
    with psycopg.connect(replica.url.rsplit("/", 1)[0] + "/" + DB) as conn:
        rows = [r[0] for r in conn.execute("SELECT request_id FROM gw_spend WHERE request_id LIKE 'a-%' "
                                           "OR request_id LIKE 'b-%'")]
    answered = load_a.received | load_b.received
    assert len(rows) == len(set(rows)), "a request is in the ledger twice"
    assert answered <= set(rows), f"lost: {sorted(answered - set(rows))[:5]}"
    assert set(rows) - answered <= in_flight_a, "only a request cut by the kill may be in the ledger unanswered"
