"""SQLite through aiosqlite (the stdlib driver on a thread of its own): one file, WAL, one writer at a
time across processes (`BEGIN IMMEDIATE` waits up to the busy timeout).

The ledger's group commits run on the event loop itself (`batch_now`) when the write lock is free at
once: a commit in WAL mode is a few page writes into the OS cache (`synchronous=NORMAL`: no fsync, and
a process crash loses no commit), cheaper than handing it to a thread. It never waits there: a busy
lock returns False and the caller takes `batch` (a worker thread, the busy timeout). The fsyncs of WAL
checkpoints stay off the loop: its connection never checkpoints; every `CHECKPOINT_EVERY` commits one
batch goes to the worker thread instead, which checkpoints after committing it. The ledger commits one
batch at a time, so that checkpoint runs with no writer of ours beside it and completes, and the next
commit writes the WAL from its start again (a checkpoint racing a stream of commits never does).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from gateway.store.db import Params, refused, unavailable
from gateway.store.types import Conflict

T = TypeVar("T")
SQLITE_BUSY = 5
# what SQLite (or binding a value for it) raises for the data itself, the same every time it is tried: a
# constraint (a NULL where a value is required: NaN is stored as NULL), a value too big, a value of a type
# it cannot bind (ProgrammingError: the ledger's connections are never used closed or from another
# thread), an integer over 64 bits, a string that is not UTF-8 (a lone surrogate). Anything else is the
# file or the lock: retried.
REFUSED = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.ProgrammingError, OverflowError, UnicodeEncodeError)
# a UNIQUE or PRIMARY KEY constraint (SQLITE_CONSTRAINT_UNIQUE, _PRIMARYKEY): a name taken meanwhile, 409;
# any other constraint (NOT NULL, CHECK, a trigger's RAISE) refuses the data, as PostgreSQL's class 23 does
TAKEN = (2067, 1555)
CHECKPOINT_EVERY = 256  # commits of a few pages each: about SQLite's own default of 1000 WAL pages


class _Tx:
    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection):
        self._conn = conn

    async def exec(self, sql: str, params: Params = ()) -> int:
        cur = await self._conn.execute(sql, tuple(params))
        return cur.rowcount

    async def many(self, sql: str, rows: Sequence[Params]) -> None:
        await self._conn.executemany(sql, [tuple(r) for r in rows])

    async def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        cur = await self._conn.execute(sql, tuple(params))
        return [tuple(r) for r in await cur.fetchall()]


class SqliteDatabase:
    dialect = "sqlite"

    def __init__(self, path: str, busy_timeout_s: float):
        self._path, self._timeout = path, busy_timeout_s
        self.local_path: str | None = path
        self._conn: aiosqlite.Connection | None = None
        self._plain: sqlite3.Connection | None = None  # `batch`'s, used on worker threads under the lock
        self._inline: sqlite3.Connection | None = None  # `batch_now`'s, on the loop: never waits, never syncs
        self._commits = 0  # by `batch_now` since the last checkpoint
        self._lock = asyncio.Lock()

    async def _connect(self) -> aiosqlite.Connection:
        if self._conn is None:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            conn = await aiosqlite.connect(self._path, timeout=self._timeout, isolation_level=None)
            try:
                await _into_wal(conn, self._timeout)
                await conn.execute("PRAGMA synchronous=NORMAL")  # WAL: a process crash loses no commit
            except BaseException:
                # its thread is no daemon: left open, it would keep the process from ever exiting (a
                # failed start then hung, and with `--workers` so did the supervisor, waiting for it)
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def transact(self, fn: Callable[[_Tx], Awaitable[T]], *, write: bool = True) -> T:
        async with self._lock:
            try:
                conn = await self._connect()
                await conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    result = await fn(_Tx(conn))
                except BaseException:
                    await conn.execute("ROLLBACK")
                    raise
                await conn.execute("COMMIT")
                return result
            except REFUSED as exc:  # the rows sent, not the file: rolled back, the connection kept
                if isinstance(exc, sqlite3.IntegrityError) and exc.sqlite_errorcode in TAKEN:
                    raise Conflict("the name is taken") from None
                raise refused(exc) from None
            except (sqlite3.Error, OSError) as exc:
                await self._drop()
                raise unavailable(exc) from None

    async def batch(self, sql: str, rows: Sequence[Params]) -> None:
        """On a plain sqlite3 connection of its own, in one trip to a worker thread: BEGIN, the rows,
        COMMIT (three trips through aiosqlite's queue cost the request path more than the commit)."""
        async with self._lock:
            try:
                await asyncio.to_thread(self._batch, sql, [tuple(r) for r in rows])
            except REFUSED as exc:
                raise refused(exc) from None
            except (sqlite3.Error, OSError) as exc:
                self._plain = None
                raise unavailable(exc) from None

    async def statement(self, sql: str, params: Params) -> None:
        async def run(tx: _Tx) -> None:
            await tx.exec(sql, params)

        await self.transact(run)

    def _batch(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if self._plain is None:
            self._plain = self._open_plain(self._timeout)
        _insert(self._plain, sql, rows)
        if self._commits >= CHECKPOINT_EVERY:
            self._plain.execute("PRAGMA wal_checkpoint(PASSIVE)")
            self._commits = 0

    def batch_now(self, sql: str, rows: Sequence[Params]) -> bool:
        """The batch committed here and now, or False when that would wait (the lock is taken, in this
        process or another): then `batch`."""
        if self._lock.locked() or self._commits >= CHECKPOINT_EVERY:
            return False
        try:
            if self._inline is None:
                self._inline = self._open_plain(0.0)
                self._inline.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints fsync: not on the loop
            _insert(self._inline, sql, rows)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == SQLITE_BUSY:
                return False
            self._drop_inline()
            raise unavailable(exc) from None
        except REFUSED as exc:
            raise refused(exc) from None
        except (sqlite3.Error, OSError) as exc:
            self._drop_inline()
            raise unavailable(exc) from None
        self._commits += 1
        return True

    def _open_plain(self, timeout_s: float) -> sqlite3.Connection:
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _drop_inline(self) -> None:
        conn, self._inline = self._inline, None
        if conn is not None:
            conn.close()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except (sqlite3.Error, OSError):
                pass

    async def close(self) -> None:
        async with self._lock:
            await self._drop()
            self._drop_inline()
            plain, self._plain = self._plain, None
            if plain is not None:
                plain.close()


async def _into_wal(conn: aiosqlite.Connection, within_s: float) -> None:
    """WAL mode (kept by the file once set). Setting it on a new file takes an exclusive lock, and SQLite
    answers BUSY at once, without waiting out its busy timeout, while another connection holds a lock
    (the other `--workers` opening the same new file): tried again until `within_s` has passed."""
    deadline = time.monotonic() + within_s
    pause = 0.005
    while True:
        try:
            await conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != SQLITE_BUSY or time.monotonic() + pause > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)


def _insert(conn: sqlite3.Connection, sql: str, rows: Sequence[Params]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(sql, rows)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
