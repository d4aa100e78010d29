"""PostgreSQL through psycopg 3 (async): one connection per role, reconnected after a failure, every
transaction bounded in time so a hung server cannot hold a caller; `listen` follows a NOTIFY channel."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg

from gateway.store.db import Params, refused, unavailable
from gateway.store.types import Conflict

T = TypeVar("T")
OP_TIMEOUT_S = 5.0
# SQLSTATE classes of an error about the data sent, not the server or the connection: 22 data exception
# (a value out of range, a character the database cannot store), 23 integrity constraint violation (a NULL
# where a value is required), 54 program limit exceeded (a value too big). The same data fails the same way
# every time; anything else (08 connection, 53 resources, 57 operator intervention or a timeout, ...) may
# pass when tried again.
DATA_CLASSES = ("22", "23", "54")


def _read_write(url: str) -> dict[str, Any]:
    """The store writes (the ledger, admin changes): of the hosts a URL names, connect to the primary
    only. A URL that says otherwise is left as it is (docs/scale-out.md, PostgreSQL)."""
    return {} if "target_session_attrs" in url else {"target_session_attrs": "read-write"}


def _data_error(exc: BaseException) -> bool:
    """psycopg's classes for SQLSTATE 22 and 23 (also raised before sending: a NUL in a text parameter),
    or a SQLSTATE of `DATA_CLASSES`; or a text the connection's encoding cannot carry (psycopg encodes it
    before sending: a lone surrogate, or a character outside a LATIN1 database's encoding)."""
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError | UnicodeEncodeError):
        return True
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "")[:2] in DATA_CLASSES


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


class _Tx:
    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.AsyncConnection[Any]):
        self._conn = conn

    async def exec(self, sql: str, params: Params = ()) -> int:
        cur = await self._conn.execute(_pg(sql), tuple(params))
        return cur.rowcount

    async def many(self, sql: str, rows: Sequence[Params]) -> None:
        async with self._conn.cursor() as cur:
            await cur.executemany(_pg(sql), [tuple(r) for r in rows])

    async def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        cur = await self._conn.execute(_pg(sql), tuple(params))
        return [tuple(r) for r in await cur.fetchall()]


class PgDatabase:
    dialect = "postgresql"
    local_path: str | None = None

    def __init__(self, url: str, connect_timeout_s: float, op_timeout_s: float = OP_TIMEOUT_S):
        self._url, self._connect_timeout, self._op_timeout = url, connect_timeout_s, op_timeout_s
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self._url, autocommit=True, connect_timeout=max(1, round(self._connect_timeout)),
                **_read_write(self._url))
        return self._conn

    async def transact(self, fn: Callable[[_Tx], Awaitable[T]], *, write: bool = True) -> T:
        async with self._lock:
            try:
                async with asyncio.timeout(self._op_timeout):
                    conn = await self.connect()
                    async with conn.transaction():
                        return await fn(_Tx(conn))
            except psycopg.errors.UniqueViolation:
                raise Conflict("the name is taken") from None
            except (psycopg.Error, OSError, TimeoutError, UnicodeEncodeError) as exc:
                if _data_error(exc):  # the data sent, not the server: rolled back, the connection kept
                    raise refused(exc) from None
                await self._drop()
                raise unavailable(exc) from None

    async def batch(self, sql: str, rows: Sequence[Params]) -> None:
        async def run(tx: _Tx) -> None:
            await tx.many(sql, rows)

        await self.transact(run)

    async def statement(self, sql: str, params: Params) -> None:
        """Autocommit: the statement is its own transaction, no BEGIN and COMMIT round trips. Data the
        server refuses is `StoreRefused` (the connection, fine, is kept)."""
        async with self._lock:
            try:
                async with asyncio.timeout(self._op_timeout):
                    conn = await self.connect()
                    await conn.execute(_pg(sql), tuple(params))
            except psycopg.errors.UniqueViolation:
                raise Conflict("the name is taken") from None
            except (psycopg.Error, OSError, TimeoutError, UnicodeEncodeError) as exc:
                if _data_error(exc):
                    raise refused(exc) from None
                await self._drop()
                raise unavailable(exc) from None

    def batch_now(self, sql: str, rows: Sequence[Params]) -> bool:
        return False  # a server round trip: always `batch`

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                async with asyncio.timeout(1.0):
                    await conn.close()
            except (psycopg.Error, OSError, TimeoutError):
                pass

    async def close(self) -> None:
        await self._drop()

    async def listen(self, channel: str, on_notify: Callable[[], None]) -> None:
        """Follow `channel` until cancelled: `on_notify` on every notification (and on each reconnect,
        since notifications sent while disconnected are lost)."""
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, connect_timeout=max(1, round(self._connect_timeout)),
                    **_read_write(self._url))
            except (psycopg.Error, OSError):
                await asyncio.sleep(1.0)  # reconnect backoff; the version poll covers the gap
                continue
            try:
                await conn.execute(f"LISTEN {channel}")
                on_notify()
                async for _ in conn.notifies():
                    on_notify()
            except (psycopg.Error, OSError):
                await asyncio.sleep(1.0)
            finally:
                await conn.close()
