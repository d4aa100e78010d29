"""The spend ledger's journal: a SQLite store's rows made crash-safe before their last byte, without the
request waiting for a commit.

A request's row is appended to this process's journal file (one `write` of one line) before its last
byte, and group-committed into the database later by `SpendLedger`, which empties the file whenever
every row in it is committed. A process killed in between leaves its file behind; the next process to
open the store commits what it holds (`ON CONFLICT (row_id) DO NOTHING`: a row committed already is not
counted twice) before it serves, then deletes it.

Why: waiting for a group commit holds every answer's last write a loop iteration or more, and under load
that costs more than the commit (S2: +18% CPU per request, -20% requests/s, bench/README.md); an append
is one system call of a few µs and waits for nothing. The line is in the OS page cache when `write`
returns, which a process crash does not lose: the durability of the SQLite file itself under
`synchronous=NORMAL`, where a power loss can lose the last commits of both. For SQLite only: its journal
lives on the gateway's own disk, as its database does; a PostgreSQL replica's disk may not outlive it.

Files: `<database>.ledger/<pid>-<random>.rows`, a JSON array per line in the table's column order. Each
is held under an exclusive `flock` by its writer for as long as it runs, so a process replays only the
files no live process holds (another worker's is skipped, whatever its state).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import NoneType

import orjson
import structlog

from gateway.store.types import SpendRow

log = structlog.get_logger("gateway")
SUFFIX = ".rows"
REPLAY_BATCH = 1000
_FIELDS = len(SpendRow._fields)
# the types a line's values may have, in SpendRow's field order (what orjson reads back from one written)
_S, _OPT, _INT, _NUM = frozenset({str}), frozenset({str, NoneType}), frozenset({int}), frozenset({int, float})
_TYPES = (_S, _S, _NUM, _S, _OPT, _OPT, _S, _OPT, _S, _S, *(_INT,) * 5, _NUM, _OPT, _OPT, _OPT)


class SpendJournal:
    """This process's journal file, locked for its lifetime; `broken` after a failed write (disk full):
    the ledger then makes requests wait for their commit again."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd
        self.size = 0  # bytes appended since the file was last emptied
        self.broken = False

    @classmethod
    def create(cls, directory: Path) -> SpendJournal:
        path, fd = _new_file(directory)
        return cls(path, fd)

    def append(self, row: SpendRow) -> bool:
        """The row is in the file (the OS's cache) when this returns True; False: it is not, and while
        `broken` no later row will be."""
        if self.broken:
            return False
        try:
            line = orjson.dumps(tuple(row)) + b"\n"
        except orjson.JSONEncodeError:  # a lone surrogate, an integer over 64 bits: no store takes it either
            return False  # its request waits for the commit, which refuses the row (`ledger.py`)
        return self._write(line)

    def _write(self, data: bytes) -> bool:
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            return self._broke(exc)
        if written != len(data):  # a torn line would swallow the next one: stop here
            return self._broke(OSError("short write"))
        self.size += written
        return True

    def empty(self) -> None:
        """Every row appended so far is committed: start the file again (O_APPEND writes at its new end)."""
        if self.size and not self.broken:
            try:
                os.ftruncate(self._fd, 0)
            except OSError as exc:
                self._broke(exc)
                return
            self.size = 0

    def rewrite(self, rows: Iterable[SpendRow]) -> None:
        """A file holding only `rows` (the ones not committed yet) takes this one's place: keeps the file
        small while the database is slow to catch up. A crash in between leaves both: replayed alike."""
        if self.broken:
            return
        try:
            path, fd = _new_file(self.path.parent)
        except OSError as exc:
            self._broke(exc)
            return
        old_path, old_fd = self.path, self._fd
        self.path, self._fd, self.size = path, fd, 0
        if self._write(b"".join(map(_line, rows))):  # one system call
            old_path.unlink(missing_ok=True)
        os.close(old_fd)  # kept when the new one failed: the next start replays both

    def close(self, remove: bool) -> None:
        """`remove`: every row is committed; else the file stays for the next start to replay."""
        if remove and not self.broken:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)

    def _broke(self, exc: OSError) -> bool:
        self.broken = True
        log.warning("ledger_journal_failed", reason=type(exc).__name__,
                    message="requests wait for their ledger commit from now on")
        return False


def _line(row: SpendRow) -> bytes:
    """A row's line; none for one JSON cannot carry (`append` never wrote it: its commit refuses it)."""
    try:
        return orjson.dumps(tuple(row)) + b"\n"
    except orjson.JSONEncodeError:
        return b""


async def replay(directory: Path, commit: Callable[[list[SpendRow]], Awaitable[None]]) -> int:
    """Commit the rows of every journal no live process holds, then delete it; the rows replayed. A
    failing `commit` raises, and the files stay for the next try. At start, before serving."""
    orphans = await asyncio.to_thread(_claim_orphans, directory)
    committed = False
    try:
        rows = [row for orphan in orphans for row in orphan.rows]
        for i in range(0, len(rows), REPLAY_BATCH):
            await commit(rows[i:i + REPLAY_BATCH])
        committed = True
    finally:
        await asyncio.to_thread(_release, orphans, committed)
    if rows:
        log.info("ledger_journal_replayed", rows=len(rows), files=len(orphans))
    return len(rows)


@dataclass(frozen=True, slots=True)
class _Orphan:
    path: Path
    fd: int  # holds the file's lock while its rows are committed
    rows: list[SpendRow]


def _claim_orphans(directory: Path) -> list[_Orphan]:
    orphans = []
    for path in sorted(directory.glob("*" + SUFFIX)) if directory.is_dir() else ():
        fd = _claim(path)
        if fd is not None:  # else a live process's own
            orphans.append(_Orphan(path, fd, parse_rows(path.read_bytes())))
    return orphans


def _release(orphans: list[_Orphan], committed: bool) -> None:
    for orphan in orphans:
        if committed:
            orphan.path.unlink(missing_ok=True)
        os.close(orphan.fd)


def parse_rows(data: bytes) -> list[SpendRow]:
    """The whole lines of a journal; a line cut by the crash (no newline) or unreadable (not JSON, or not
    values of a row's types: garbled) is skipped."""
    rows: list[SpendRow] = []
    lines = data.split(b"\n")
    for line in lines[:-1]:  # the last piece has no newline: empty, or a write the crash cut short
        try:
            values = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        # a line of an older version has fewer fields (before keys had ids: no `key_id`; before IdP
        # tokens: no `subject`; before teams had ids: no `team_id`), each None then
        if isinstance(values, list) and _FIELDS - 3 <= len(values) <= _FIELDS and \
                all(type(v) in kinds for v, kinds in zip(values, _TYPES, strict=False)):
            rows.append(SpendRow(*values))
    return rows


def _new_file(directory: Path) -> tuple[Path, int]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else can hold it
    return path, fd


def _claim(path: Path) -> int | None:
    """A descriptor holding `path`'s lock, or None while its writer lives (or it is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
