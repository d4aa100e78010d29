"""The one seam between the store's SQL and a driver: a transaction runner per connection.

SQL is written once, with `?` placeholders; each driver adapts it. A driver error never leaves this
package as itself: a taken name (a unique constraint) is `Conflict`; a value the database refuses, told
by the error's class (SQLSTATE class 22 data exception, 23 integrity violation, 54 a limit exceeded;
SQLite's other constraint and too-big errors, and a value its binding cannot carry), is `StoreRefused`,
in a transaction (the admin API's writes: a 400) as on the ledger's writes (`batch`, `batch_now`, and
PostgreSQL's `statement`: the row is dropped); anything else is `StoreUnavailable` (the connection, a
timeout, the server's resources: retried). Their messages name the error class only, never a URL, a
statement or a value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from gateway.store.types import StoreRefused, StoreUnavailable

T = TypeVar("T")
Params = Sequence[Any]


class Tx(Protocol):
    async def exec(self, sql: str, params: Params = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    async def many(self, sql: str, rows: Sequence[Params]) -> None: ...

    async def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]: ...


class Database(Protocol):
    dialect: str
    local_path: str | None  # the database's own file on this machine (SQLite); None: a server's

    async def transact(self, fn: Callable[[Tx], Awaitable[T]], *, write: bool = True) -> T:
        """Run `fn` in one transaction on this connection (one at a time), committed when it returns."""
        ...

    async def batch(self, sql: str, rows: Sequence[Params]) -> None:
        """One statement for many rows, in one transaction (the ledger's group commit)."""
        ...

    async def statement(self, sql: str, params: Params) -> None:
        """One write statement, committed on its own (a transaction of its own, one round trip)."""
        ...

    def batch_now(self, sql: str, rows: Sequence[Params]) -> bool:
        """`batch`, done before returning where the driver can without waiting (no I/O wait, no lock
        wait, on the event loop); False where it cannot, and nothing was written: then `batch`."""
        ...

    async def close(self) -> None: ...


def unavailable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(f"the store is unavailable ({type(exc).__name__})")


def refused(exc: BaseException) -> StoreRefused:
    return StoreRefused(f"the store refuses a value ({type(exc).__name__})")


async def open_database(url: str, connect_timeout_s: float) -> Database:
    """A connection to `url` (connected lazily, reconnected after a failure)."""
    if url.startswith("sqlite:///"):
        from gateway.store.sqlite import SqliteDatabase

        return SqliteDatabase(url.removeprefix("sqlite://"), connect_timeout_s)
    from gateway.store.postgres import PgDatabase

    return PgDatabase(url, connect_timeout_s)
