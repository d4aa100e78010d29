"""The spend ledger's commit paths on real databases (no mocks): SQLite committed on the loop, or, while
another connection holds the write lock, on a worker thread without holding the loop; under load a
commit every interval carries every row queued meanwhile, its requests released together; a hung store
releases the waiting requests after `wait_s` (and the next ones wait again) and keeps their rows; the
loop's commits never checkpoint but the WAL stays bounded; PostgreSQL's one-statement batch keeps every
value as it was; a row is its own parameters in the table's column order on both."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gateway.store import SpendLedger, Store
from gateway.store.ledger import MAX_BATCH
from gateway.store.types import SpendRow
from tests.postgres_server import PostgresServer

COLS = ("row_id, request_id, ts, day, key_name, team, model, deployment, api, outcome, input_tokens, "
        "output_tokens, cached_input_tokens, cache_creation_input_tokens, reasoning_tokens, cost_usd, key_id, "
        "subject, team_id")


def _row(i: int, **kw: object) -> SpendRow:
    fields: dict[str, object] = dict(row_id=f"id-{i}", request_id=f"r-{i}", ts=1_764_633_600.123456, day="2026-12-02",
                                     key="k", team="t", model="m", deployment="p/m", api="chat", outcome="ok",
                                     input_tokens=11, output_tokens=22, cached_input_tokens=3,
                                     cache_creation_input_tokens=4, reasoning_tokens=5, cost_usd=0.1)
    fields.update(kw)
    return SpendRow(**fields)  # type: ignore[arg-type]


async def _ledger(tmp_path: Path, wait_s: float = 5.0, every_s: float = 0.002) -> tuple[Store, SpendLedger, list[int]]:
    store = await Store.open(f"sqlite:///{tmp_path}/s.db")
    await store.migrate()
    errors: list[int] = []
    ledger = SpendLedger(store, wait_s=wait_s, on_error=lambda: errors.append(1), commit_every_s=every_s)
    ledger.start()
    return store, ledger, errors


def _ids(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "s.db") as other:
        return sorted(r[0] for r in other.execute("SELECT row_id FROM gw_spend"))


def _hold_write_lock(tmp_path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's writer, say `gateway admin`
    return other


async def test_a_row_is_its_own_parameters_in_the_tables_column_order(tmp_path: Path) -> None:
    store, ledger, _ = await _ledger(tmp_path)
    row = _row(1, key=None, deployment="p/m'\"é")
    await ledger.record(row)
    with sqlite3.connect(tmp_path / "s.db") as other:
        assert other.execute(f"SELECT {COLS} FROM gw_spend").fetchall() == [tuple(row)]
    await ledger.close()
    await store.close()


async def test_under_load_a_commit_every_interval_carries_every_row_queued_meanwhile(tmp_path: Path) -> None:
    store, ledger, _ = await _ledger(tmp_path, every_s=0.5)
    await ledger.record(_row(0))  # an idle ledger: committed at the next loop iteration
    await asyncio.gather(*(ledger.record(_row(i)) for i in range(1, 50)))  # queued together: one commit
    later = [asyncio.create_task(ledger.record(_row(i))) for i in range(50, 100)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert not any(t.done() for t in later)  # they wait for the interval since the last commit
    await asyncio.wait_for(asyncio.gather(*later), 5.0)
    assert ledger.commits == 3 and len(_ids(tmp_path)) == 100  # 1, then 49, then 50 in one commit
    await ledger.close()
    await store.close()


async def test_a_batch_cut_at_max_batch_releases_its_waiters_only_once_all_their_rows_are_in(
        tmp_path: Path) -> None:
    store, ledger, _ = await _ledger(tmp_path, every_s=1.0)  # the second piece a second after the first
    n = MAX_BATCH + MAX_BATCH // 2  # queued in one iteration: one shared future, committed in two pieces
    try:
        await asyncio.wait_for(asyncio.gather(*(ledger.record(_row(i)) for i in range(n))), 10.0)
        assert len(_ids(tmp_path)) == n and ledger.commits == 2
    finally:
        await ledger.close()
        await store.close()


async def test_a_held_write_lock_is_waited_for_off_the_loop(tmp_path: Path) -> None:
    store, ledger, errors = await _ledger(tmp_path)
    other = _hold_write_lock(tmp_path)
    recording = asyncio.create_task(ledger.record(_row(1)))
    # the loop runs on (this wait returns) while the commit waits for the lock on a worker thread
    done, _ = await asyncio.wait([recording], timeout=0.3)
    assert not done and _ids(tmp_path) == []
    other.execute("COMMIT")
    other.close()
    await recording
    assert _ids(tmp_path) == ["id-1"]
    await ledger.record(_row(2))  # the lock is free again: committed on the loop
    assert _ids(tmp_path) == ["id-1", "id-2"]
    await ledger.close()
    await store.close()
    assert errors == []


async def test_a_hung_store_releases_requests_after_wait_s_and_keeps_their_rows(tmp_path: Path) -> None:
    store, ledger, _ = await _ledger(tmp_path, wait_s=0.2)
    other = _hold_write_lock(tmp_path)
    await asyncio.wait_for(asyncio.gather(*(ledger.record(_row(i)) for i in range(5))), 3.0)  # released
    assert _ids(tmp_path) == []  # not committed: the lock is still held
    assert ledger.failing  # a commit missed its wait: the store is marked failing ...
    later = asyncio.create_task(ledger.record(_row(5)))
    await asyncio.sleep(0)
    assert later.done()  # ... and the next requests do not wait (a hung store costs one wait, not one each)
    other.execute("COMMIT")
    other.close()
    # the commit in flight (the first five rows) ends once the lock is free, and the later row's commit
    # follows it: polled for both, for 5 s at most (the store recovers between the two)
    for _ in range(500):
        if not ledger.failing and len(_ids(tmp_path)) == 6:
            break
        await asyncio.sleep(0.01)
    assert not ledger.failing
    assert _ids(tmp_path) == [f"id-{i}" for i in range(6)]
    await ledger.record(_row(6))  # ... and requests wait for their commit again
    assert _ids(tmp_path)[-1] == "id-6"
    await ledger.close()
    await store.close()


async def test_commits_on_the_loop_keep_the_wal_bounded(tmp_path: Path) -> None:
    store, ledger, _ = await _ledger(tmp_path)
    commits = 900
    for i in range(commits):  # one row a commit: each appends at least 3 pages (table, 2 indexes)
        await ledger.record(_row(i))
    wal = (tmp_path / "s.db-wal").stat().st_size  # before closing: the last connection's close removes it
    await ledger.close()
    await store.close()
    assert wal < commits * 3 * 4096 / 2  # checkpoints let SQLite write the WAL from its start again
    assert len(_ids(tmp_path)) == commits


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_postgres_batches_keep_every_value_and_are_idempotent(postgres: PostgresServer) -> None:
    store = await Store.open(postgres.url)
    await store.migrate()
    ledger = SpendLedger(store, wait_s=5.0, on_error=lambda: None)
    ledger.start()
    rows = [_row(1), _row(2, key=None, team=None, deployment=None, cost_usd=1e-9),
            _row(3, key="quote ' \" \\ é 🙂", input_tokens=2**62, ts=0.1 + 0.2)]
    await asyncio.gather(*(ledger.record(r) for r in rows))
    await store.record_spend(rows[:2])  # a batch sent again
    async with await psycopg.AsyncConnection.connect(postgres.url) as conn:
        cur = await conn.execute(f"SELECT {COLS} FROM gw_spend ORDER BY row_id")
        assert await cur.fetchall() == [tuple(r) for r in rows]
    await ledger.close()
    await store.close()
