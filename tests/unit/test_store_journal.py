"""The spend ledger's journal on a real SQLite file and real processes (no mocks): a row journaled by a
process killed with SIGKILL is committed by the next start, once, with a line the kill cut skipped; a live
process's journal is left alone; a write that fails (a file size limit) stops the journal at a whole line;
a journaled request waits for nothing, its row is committed within the interval (at once for `settle`)
and the journal is emptied then; a graceful close leaves no file behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from gateway.store import SpendLedger, Store
from gateway.store.journal import SpendJournal, parse_rows, replay
from gateway.store.ledger import COMMIT_AT_ROWS, JOURNAL_COMMIT_EVERY_S
from gateway.store.types import SpendRow


def _row(i: int) -> SpendRow:
    return SpendRow(f"id-{i}", f"r-{i}", 1_764_633_600.5 + i, "2026-12-02", "k", None, "m", "p/m'\"é", "chat",
                    "ok", 11, 22, 3, 4, 5, 0.1 * i)


def _rows_in(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute("SELECT * FROM gw_spend").fetchall())


async def _store(tmp_path: Path) -> Store:
    store = await Store.open(f"sqlite:///{tmp_path}/s.db")
    await store.migrate()
    return store


def _run_child(code: str, directory: Path) -> subprocess.CompletedProcess[str]:
    """A separate process (the journal's lock is a process's), its own stdout for what it reports."""
    prelude = "import os, signal, sys\nfrom pathlib import Path\nfrom gateway.store.journal import SpendJournal\n" \
              "from tests.unit.test_store_journal import _row\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code), str(directory)],
                          capture_output=True, text=True, timeout=60, check=False, cwd=Path(__file__).parents[2])


async def test_a_killed_processs_rows_are_committed_by_the_next_start_once(tmp_path: Path) -> None:
    directory = tmp_path / "s.db.ledger"
    child = _run_child("""
        journal = SpendJournal.create(Path(sys.argv[1]))
        for i in range(5):
            assert journal.append(_row(i))
        os.write(journal._fd, b'["id-cut", "r-cut"')  # a write the kill cut short: no newline
        os.kill(os.getpid(), signal.SIGKILL)
    """, directory)
    assert child.returncode == -signal.SIGKILL, child.stderr
    store = await _store(tmp_path)
    try:
        await store.record_spend([_row(0)])  # committed before the kill: not counted twice
        assert await replay(directory, store.record_spend) == 5
        assert _rows_in(tmp_path / "s.db") == sorted(tuple(_row(i)) for i in range(5))
        assert list(directory.iterdir()) == []  # replayed: deleted
        assert await replay(directory, store.record_spend) == 0
    finally:
        await store.close()


async def test_a_live_processs_journal_is_not_replayed(tmp_path: Path) -> None:
    directory = tmp_path / "s.db.ledger"
    live = SpendJournal.create(directory)  # held by this process: another open file cannot take its lock
    assert live.append(_row(1))
    store = await _store(tmp_path)
    try:
        assert await replay(directory, store.record_spend) == 0
        assert _rows_in(tmp_path / "s.db") == [] and live.path.exists()
    finally:
        live.close(remove=True)
        await store.close()
    assert not live.path.exists()


def test_a_failed_write_stops_the_journal_at_a_whole_line(tmp_path: Path) -> None:
    directory = tmp_path / "j"
    child = _run_child("""
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the limit: EFBIG or a short write, no signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        journal = SpendJournal.create(Path(sys.argv[1]))
        n = 0
        while journal.append(_row(n)):
            n += 1
        assert journal.broken and not journal.append(_row(n + 1))
        print(n)
    """, directory)
    assert child.returncode == 0, child.stderr
    appended = int(child.stdout.split()[-1])  # after the journal's warning
    (path,) = directory.iterdir()
    assert 0 < appended < 20
    assert parse_rows(path.read_bytes()) == [_row(i) for i in range(appended)]


def test_rewrite_keeps_only_the_rows_given(tmp_path: Path) -> None:
    journal = SpendJournal.create(tmp_path)
    for i in range(4):
        journal.append(_row(i))
    old = journal.path
    journal.rewrite([_row(2), _row(3)])
    assert not old.exists() and journal.path.exists()
    assert parse_rows(journal.path.read_bytes()) == [_row(2), _row(3)]
    journal.close(remove=False)
    assert journal.path.exists()


async def test_a_journaled_row_waits_for_nothing_and_is_committed_then_the_journal_emptied(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    journal = SpendJournal.create(tmp_path / "s.db.ledger")
    ledger = SpendLedger(store, wait_s=5.0, on_error=lambda: None, journal=journal)
    ledger.start()
    try:
        assert all(ledger.journaled(_row(i)) for i in range(3))  # returned at once: no await
        assert _rows_in(tmp_path / "s.db") == [] and journal.size > 0  # in the journal, not committed yet
        await ledger.settle()
        assert len(_rows_in(tmp_path / "s.db")) == 3
        assert journal.size == 0 and journal.path.stat().st_size == 0
        assert ledger.journaled(_row(3))
        # the interval's own commit (no settle): its timer is due at most an interval from now, so it
        # runs before a timer set for a whole interval later
        await asyncio.sleep(JOURNAL_COMMIT_EVERY_S)
        assert len(_rows_in(tmp_path / "s.db")) == 4
    finally:
        await ledger.close()
        await store.close()
    assert not journal.path.exists()  # everything committed: a graceful close leaves nothing behind


async def test_a_request_whose_row_the_journal_refused_waits_for_its_commit(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    journal = SpendJournal.create(tmp_path / "s.db.ledger")
    journal.broken = True  # as after a failed write: append refuses every row
    ledger = SpendLedger(store, wait_s=5.0, on_error=lambda: None, journal=journal)
    ledger.start()
    try:
        assert not ledger.journaled(_row(1))
        await asyncio.wait_for(ledger.record(_row(1)), 2.0)
        assert len(_rows_in(tmp_path / "s.db")) == 1
    finally:
        await ledger.close()
        await store.close()
    os.stat(journal.path)  # a broken journal is never deleted: it may hold rows


async def test_with_a_journal_a_commit_comes_as_soon_as_enough_rows_are_queued(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    ledger = SpendLedger(store, wait_s=5.0, on_error=lambda: None, journal=SpendJournal.create(tmp_path / "j"))
    ledger.start()
    try:
        assert ledger.journaled(_row(0))
        await asyncio.sleep(0)  # idle: committed at the next iteration
        assert len(_rows_in(tmp_path / "s.db")) == 1
        few = COMMIT_AT_ROWS - 1
        assert all(ledger.journaled(_row(i)) for i in range(1, 1 + few))
        await asyncio.sleep(0)
        assert len(_rows_in(tmp_path / "s.db")) == 1  # fewer: they wait for the interval
        assert ledger.journaled(_row(1 + few))
        await asyncio.sleep(0)
        assert len(_rows_in(tmp_path / "s.db")) == 2 + few  # enough: at the next iteration
    finally:
        await ledger.close()
        await store.close()


async def test_while_the_store_is_down_the_journal_holds_no_more_than_the_bounded_backlog(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite:///{tmp_path}/s.db", connect_timeout_s=0.1)  # the busy timeout too
    await store.migrate()
    journal = SpendJournal.create(tmp_path / "s.db.ledger")
    errors: list[int] = []
    ledger = SpendLedger(store, wait_s=5.0, on_error=lambda: errors.append(1), journal=journal,
                         max_backlog=10, max_journal_bytes=3000)
    ledger.start()
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock past the busy timeout: commits fail
    try:
        assert all(ledger.journaled(_row(i)) for i in range(50))  # ~7 KB: over the bound
        await ledger.settle()  # returns once the commit has failed
        assert ledger.failing and errors and ledger.dropped == 40
        # the oldest rows were dropped from memory, and the journal was cut down to the ones kept
        assert parse_rows(journal.path.read_bytes()) == [_row(i) for i in range(40, 50)]
        assert journal.size <= 3000
    finally:
        other.execute("ROLLBACK")
        other.close()
        await ledger.close()
        await store.close()
    assert len(_rows_in(tmp_path / "s.db")) == 10  # the lock gone, the close commits what was kept
