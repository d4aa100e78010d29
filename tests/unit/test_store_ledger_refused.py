"""A spend row the database can never take (a "poison row") never stops the ledger, on real SQLite and
PostgreSQL (no mocks): the rest of its batch is committed, it is dropped and counted once, later rows are
committed, and the store is not marked failing; on SQLite's worker-thread path too; a few such rows in a
big batch cost a few commits, not one a row. The journal neither breaks on a row it cannot serialise (nor
does a rewrite) nor stops the next start on a row the database refuses or a garbled line. A store that
cannot be reached is still an outage: rows kept, the store marked failing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from gateway.config.types import StoreConfig
from gateway.store import ControlPlane, SpendLedger, Store, StoreHooks
from gateway.store.journal import SpendJournal, parse_rows
from gateway.store.types import SpendRow
from tests.ports import free_port

# values each engine refuses for ever; `sqlite` False: SQLite stores it (a NUL in text)
POISONS: dict[str, tuple[dict[str, Any], bool]] = {
    "integer_over_64_bits": ({"input_tokens": 2**63}, True),  # PostgreSQL 22003; SQLite cannot bind it
    "nan_cost": ({"cost_usd": float("nan")}, True),  # NULL in a NOT NULL column: 23502; SQLite's constraint
    "lone_surrogate": ({"subject": "\ud800"}, True),  # not UTF-8: neither orjson nor SQLite encodes it
    "a_value_of_no_columns_type": ({"input_tokens": {"n": 1}}, True),  # 22P02; SQLite cannot bind it
    "nul_in_subject": ({"subject": "a\x00b"}, False),  # PostgreSQL text cannot hold it: 22P05
    "nul_in_key_name": ({"key": "a\x00b"}, False),
}


def _row(i: int, **kw: Any) -> SpendRow:
    fields: dict[str, Any] = dict(row_id=f"id-{i:03d}", request_id=f"r-{i}", ts=1_764_633_600.5, day="2026-12-02",
                                  key="k", team="t", model="m", deployment="p/m", api="chat", outcome="ok",
                                  input_tokens=11, output_tokens=22, cost_usd=0.1)
    fields.update(kw)
    return SpendRow(**fields)


async def _ids(store_url: str) -> list[str]:
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            return sorted(r[0] for r in conn.execute("SELECT row_id FROM gw_spend"))
    async with await psycopg.AsyncConnection.connect(store_url) as conn:
        cur = await conn.execute("SELECT row_id FROM gw_spend ORDER BY row_id")
        return [r[0] for r in await cur.fetchall()]


async def _ledger(store_url: str, **kw: Any) -> tuple[Store, SpendLedger, list[int]]:
    store = await Store.open(store_url)
    await store.migrate()
    errors: list[int] = []
    ledger = SpendLedger(store, wait_s=10.0, on_error=lambda: errors.append(1), **kw)  # longer than any wait here
    ledger.start()
    return store, ledger, errors


@pytest.mark.parametrize("poison", POISONS)
async def test_a_refused_row_is_dropped_and_the_rest_of_its_batch_and_later_rows_are_committed(
        store_url: str, poison: str) -> None:
    bad, sqlite_refuses = POISONS[poison]
    refused = 1 if sqlite_refuses or not store_url.startswith("sqlite") else 0  # SQLite stores a NUL: no poison
    store, ledger, errors = await _ledger(store_url)
    try:
        rows = [_row(i, **(bad if i == 4 else {})) for i in range(10)]
        # queued together: one batch (SQLite: committed on the loop; PostgreSQL: by the writer)
        await asyncio.wait_for(asyncio.gather(*(ledger.record(r) for r in rows)), 5.0)
        assert await _ids(store_url) == [f"id-{i:03d}" for i in range(10) if i != 4 or not refused]
        assert (ledger.refused, errors, ledger.failing) == (refused, [1] * refused, False)
        await asyncio.wait_for(ledger.record(_row(10)), 5.0)  # the ledger goes on: requests wait for commits
        assert (await _ids(store_url))[-1] == "id-010" and not ledger.failing and errors == [1] * refused
    finally:
        await ledger.close()
        await store.close()


async def test_on_sqlites_worker_thread_a_refused_row_is_dropped_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store, ledger, errors = await _ledger(url)
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the loop's commit would wait: the writer commits on a worker thread
    try:
        recording = asyncio.gather(*(ledger.record(_row(i, **({"input_tokens": 2**63} if i == 2 else {})))
                                     for i in range(5)))
        done, _ = await asyncio.wait([recording], timeout=0.1)
        assert not done  # waiting for the lock, off the loop
        other.execute("COMMIT")
        await asyncio.wait_for(recording, 5.0)
        assert await _ids(url) == ["id-000", "id-001", "id-003", "id-004"]
        assert (ledger.refused, errors, ledger.failing) == (1, [1], False)
        await asyncio.wait_for(ledger.record(_row(5)), 5.0)
        assert (await _ids(url))[-1] == "id-005"
    finally:
        other.close()
        await ledger.close()
        await store.close()


async def test_a_few_refused_rows_in_a_big_batch_cost_a_few_commits_not_one_a_row(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store, ledger, errors = await _ledger(url)
    bad = {17, 18, 301, 499}
    try:
        await asyncio.wait_for(asyncio.gather(*(
            ledger.record(_row(i, **({"cost_usd": float("nan")} if i in bad else {}))) for i in range(500))), 10.0)
        assert await _ids(url) == [f"id-{i:03d}" for i in range(500) if i not in bad]
        assert ledger.refused == len(errors) == 4 and not ledger.failing
        assert ledger.commits < 4 * 2 * 9  # halves: about 2·log2(500) commits a refused row, at most
    finally:
        await ledger.close()
        await store.close()


async def test_a_store_that_cannot_be_reached_keeps_its_rows_and_is_marked_failing() -> None:
    """Not a refusal: a connection refused is an outage, retried (this passes before the fix too: a guard
    that the classification does not take an outage for a refused row)."""
    store = await Store.open(f"postgresql://gateway@127.0.0.1:{free_port()}/postgres", connect_timeout_s=1.0)
    errors: list[int] = []
    pending: list[int] = []
    ledger = SpendLedger(store, wait_s=10.0, on_error=lambda: errors.append(1), on_pending=pending.append)
    ledger.start()
    try:
        await asyncio.wait_for(asyncio.gather(*(ledger.record(_row(i)) for i in range(3))), 5.0)  # released
        assert ledger.failing and errors and pending[-1] == 3  # every row kept, to be retried
    finally:
        await ledger.close()
        await store.close()


async def test_a_row_the_journal_cannot_serialise_is_refused_not_the_journal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    journal = SpendJournal.create(tmp_path / "s.db.ledger")
    store, ledger, errors = await _ledger(url, journal=journal)
    try:
        bad = _row(1, subject="\ud800")
        assert not ledger.journaled(bad) and not journal.broken  # that row only: the journal goes on
        await asyncio.wait_for(ledger.record(bad), 5.0)  # so its request waits for its commit, which refuses it
        assert ledger.journaled(_row(2))
        await ledger.settle()
        assert await _ids(url) == ["id-002"] and (ledger.refused, errors, ledger.failing) == (1, [1], False)
    finally:
        await ledger.close()
        await store.close()


def test_a_rewrite_leaves_out_a_queued_row_json_cannot_carry(tmp_path: Path) -> None:
    """Such a row is queued (its request waits for its commit) but never journaled: a rewrite of the queued
    rows (the store down for long) leaves it out instead of raising in the ledger's commit."""
    journal = SpendJournal.create(tmp_path)
    journal.rewrite([_row(1), _row(2, subject="\ud800"), _row(3)])
    assert not journal.broken and parse_rows(journal.path.read_bytes()) == [_row(1), _row(3)]
    journal.close(remove=True)


def test_a_garbled_journal_line_is_skipped_not_replayed() -> None:
    good = orjson.dumps(tuple(_row(1)))
    garbled = [[*_row(2)[:6], {"m": 1}, *_row(2)[7:]], [*_row(3)[:10], True, *_row(3)[11:]],
               [*_row(4)[:2], "noon", *_row(4)[3:]]]
    data = b"".join(line + b"\n" for line in (good, *map(orjson.dumps, garbled), good))
    assert parse_rows(data) == [_row(1), _row(1)]


async def test_the_next_start_replays_a_journal_with_a_refused_row_and_drops_only_it(tmp_path: Path) -> None:
    """A killed process's journal: the row the database refuses would otherwise stop every start."""
    directory = tmp_path / "s.db.ledger"
    directory.mkdir()
    lines = [tuple(_row(0)), tuple(_row(1, input_tokens=2**63)), tuple(_row(2))]  # JSON holds 2^63, SQLite not
    (directory / "123-dead.rows").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    errors: list[str] = []
    control = ControlPlane(StoreConfig(url=f"sqlite:///{tmp_path}/s.db"),
                           StoreHooks(health=lambda up: None, error=errors.append))
    await asyncio.wait_for(control.start(), 10.0)
    try:
        assert await _ids(f"sqlite:///{tmp_path}/s.db") == ["id-000", "id-002"]
        assert errors == ["ledger"] and not (directory / "123-dead.rows").exists()  # replayed: deleted
    finally:
        await control.close()
