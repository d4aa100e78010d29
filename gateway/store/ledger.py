"""The spend ledger's group commit: one row per answered request, crash-safe before its last byte.

With a journal (SQLite: `journal.py`) a request does not wait at all: `journaled` appends its row to the
journal, which a process crash does not lose, and queues it; commits come every `JOURNAL_COMMIT_EVERY_S`
(at the next loop iteration once `COMMIT_AT_ROWS` are queued), and the journal is emptied whenever the
queue is. Waiting for the commit cost S2 +18% CPU a request and -20% requests/s; the journal a few %
(bench/README.md). A failed append (disk full) sends that request, and every later one, back to waiting.

Without one (PostgreSQL), `record` queues the row and waits for the commit that carries it. The first
row queued after a commit schedules the next one, due `COMMIT_EVERY_S` after the previous commit began
(at once when that is past), and that commit carries every row queued until then: an idle gateway
commits a single row at once; under load commits come every `COMMIT_EVERY_S` and each carries every
request that ended in between, so a commit's fixed cost (a round trip, a lock, a WAL append: 30-100 µs)
is shared by all of them and the cost per request stays a few µs, while the wait it adds is at most
`COMMIT_EVERY_S`. Where the driver can commit without waiting (SQLite's file, its write lock free) the
commit runs right there on the loop: no thread, no lock hand-over, no wake-up (a thread per commit cost
the request path more than the commit itself: its GIL hand-overs and wake-ups). Otherwise (PostgreSQL,
a busy SQLite file) one task commits a batch at a time on the driver's async path, and rows queued
meanwhile go in its next batch.

The requests of one batch wait on one future, not one each. Waiting is bounded per batch, not per
request: one timer, armed by the first waiter after a commit, releases every waiting request `wait_s`
later if no commit came first (a hung store), and marks the store failing: the requests after it do not
wait until a commit succeeds again, so a hung store costs one wait, not one per request.

Measured before the journal (S2 on a shared 2-core machine): the commit is a third to a half of what
waiting for it costs a request, the rest is the wait (the request suspended, its last write a loop
iteration or two later). Committing in `record` when the ledger was idle, to spare that request the
wait, was tried and dropped: under load the gateway's pauses make the ledger look idle at half of its
commits, which then carried 15 rows instead of 26 and cost more than the waits they spared.

Rows have the gateway's own unique id, so a batch retried after an unclear failure is never counted
twice. Store down: the rows stay queued in memory (bounded) and are retried; requests stop waiting for
them (serving goes on), an error is counted and the store reports itself down until a commit succeeds.
A row the database refuses for its data (`StoreRefused`: it would fail the same way for ever) must not
stop the ledger, nor must any other error of a commit: the batch is committed again in halves until each
refused row is alone, and that row is dropped (`ledger_row_refused`, counted); its neighbours are
committed. That costs about 2·log2(batch) commits per refused row, and nothing while commits succeed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from operator import itemgetter
from typing import TypeVar

import structlog

from gateway.store.journal import SpendJournal
from gateway.store.store import Store
from gateway.store.types import SpendRow, StoreError, StoreUnavailable

log = structlog.get_logger("gateway")
MAX_BATCH = 1000
MAX_BACKLOG = 100_000
RETRY_S = 0.5
COMMIT_EVERY_S = 0.002  # under load, a commit at most this often (requests wait for it)
JOURNAL_COMMIT_EVERY_S = 1.0  # with a journal nobody waits: at a low rate, a commit a second
COMMIT_AT_ROWS = 32  # ... and one at the next iteration once this many are queued (under S2: ~50 rows, ~0.4 ms)
MAX_JOURNAL_BYTES = 64 << 20  # a journal over this is rewritten with just the queued rows (<= MAX_BACKLOG)

Entry = tuple[SpendRow, "asyncio.Future[None] | None"]  # the future its request waits on (shared by a batch)
E = TypeVar("E")


class SpendLedger:
    def __init__(self, store: Store, wait_s: float, on_error: Callable[[], None],
                 commit_every_s: float | None = None, journal: SpendJournal | None = None,
                 max_backlog: int = MAX_BACKLOG, max_journal_bytes: int = MAX_JOURNAL_BYTES,
                 on_pending: Callable[[int], None] = lambda rows: None):
        self._store, self._wait_s, self._on_error = store, wait_s, on_error
        self._on_pending = on_pending  # llm_gateway_ledger_pending_rows, after each commit or failed one
        self._journal = journal
        self._max_backlog, self._max_journal_bytes = max_backlog, max_journal_bytes
        self._every_waited = COMMIT_EVERY_S if commit_every_s is None else commit_every_s
        self._queue: list[Entry] = []  # not committed yet, oldest first
        self._removed = 0  # rows ever taken off the queue's front (committed or dropped)
        self._waiters: asyncio.Future[None] | None = None  # what rows queued since the last commit wait on
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.Handle | None = None  # `_commit` is due (call_soon or call_at)
        self._soon = False  # ... at the next loop iteration
        self._writer: asyncio.Task[None] | None = None  # commits on the driver's async path, retries
        self._deadline: asyncio.TimerHandle | None = None
        self._last_commit = float("-inf")  # loop time the last commit began
        self._closed = False
        self.failing = False
        self.dropped = 0  # rows dropped past the backlog
        self.refused = 0  # rows dropped because the database refuses them
        self.commits = 0  # batches committed

    def start(self) -> None:
        # kept: asyncio.get_running_loop() costs a getpid() system call each time (CPython's fork check)
        self._loop = asyncio.get_running_loop()

    def journaled(self, row: SpendRow) -> bool:
        """True: the row is in the journal and queued, and the request need not wait for its commit.
        False (no journal, or it failed): `record` it."""
        journal, loop = self._journal, self._loop
        if journal is None or self._closed or loop is None or not journal.append(row):
            return False
        queue = self._queue
        queue.append((row, None))
        # `_urgent()` reduced to what it can be here: the journal took the row, and nobody waits on it
        if self._writer is None and (self._timer is None or (not self._soon and len(queue) >= COMMIT_AT_ROWS)):
            self._schedule(loop)
        return True

    async def record(self, row: SpendRow) -> None:
        """Returns once the row is committed, or at once while the store is failing (the row is kept
        and retried), or after `wait_s` at most."""
        loop = self._loop
        if self.failing or self._closed or loop is None:
            self._queue.append((row, None))
            return
        fut = self._waiters
        if fut is None:  # the first row since the last commit
            fut = self._waiters = loop.create_future()
        self._queue.append((row, fut))
        if self._deadline is None:
            self._deadline = loop.call_later(self._wait_s, self._expire)
        if self._writer is None and (self._timer is None or (not self._soon and self._urgent())):
            self._schedule(loop)
        await fut

    @property
    def _every(self) -> float:
        """The interval between commits: short while requests wait for them, long while none need to."""
        journal = self._journal
        return self._every_waited if journal is None or journal.broken else JOURNAL_COMMIT_EVERY_S

    def _urgent(self) -> bool:
        """With a journal, commit at the next loop iteration whatever the interval: enough rows for one
        commit on the loop, or a request waiting behind the journal's long interval (its append failed).
        Without one the interval is short and every request waits for it anyway."""
        journal = self._journal
        if journal is None or journal.broken:
            return False
        return len(self._queue) >= COMMIT_AT_ROWS or self._waiters is not None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        due = self._last_commit + self._every
        self._soon = loop.time() >= due or self._urgent()
        self._timer = loop.call_soon(self._commit) if self._soon else loop.call_at(due, self._commit)

    def _commit(self) -> None:
        """On the loop: commit a batch where the driver needs no wait, else hand the queue to the writer."""
        if self._timer is not None:
            self._timer.cancel()  # called directly (`settle`) while due
            self._timer = None
        loop = self._loop
        if not self._queue or self._writer is not None or self._closed or loop is None:
            return
        self._last_commit = loop.time()
        self._waiters = None  # rows queued from now on wait for the next commit
        batch = self._queue[:MAX_BATCH]
        try:
            done = self._store.record_spend_now([row for row, _ in batch])
        except StoreUnavailable as exc:
            self._failed(batch, exc)
            done = False
        except Exception:  # a row the database refuses, or a bug: the writer finds the rows (`flush`)
            done = False
        if not done:
            self._writer = loop.create_task(self._write(), name="spend-ledger")
            return
        self._committed(batch)
        if self._queue:
            self._schedule(loop)

    async def _write(self) -> None:
        try:
            while self._queue and not (self._closed and self.failing):
                if self.failing:
                    await asyncio.sleep(RETRY_S)
                await self.flush()
                if self._queue and not self.failing:  # queued during that commit: the next at its time
                    await asyncio.sleep(max(0.0, self._last_commit + self._every - self._now()))
        finally:
            self._writer = None

    async def flush(self) -> None:
        """Commit what is queued, a batch at a time, on the driver's async path; while the store is
        unavailable the rows stay queued (bounded). A batch that fails otherwise is committed in pieces,
        without the rows the database refuses."""
        while self._queue:
            batch = self._queue[:MAX_BATCH]
            self._last_commit = self._now()
            self._waiters = None
            try:
                await self._store.record_spend([row for row, _ in batch])
            except StoreUnavailable as exc:
                self._failed(batch, exc)
                return
            except Exception as exc:  # a row it refuses, or a bug: never the end of the writer
                if not await self._isolate(batch, exc):
                    return
                continue
            self._committed(batch)

    async def _isolate(self, batch: list[Entry], exc: Exception) -> bool:
        """`batch`, at the queue's front and refused whole, committed without the rows the database
        refuses; False: it became unavailable meanwhile (the rows not committed yet stay queued)."""
        before = self._removed
        try:
            await isolate(self._commit_entries, batch, exc, self._committed, self._refused)
        except StoreUnavailable as down:
            self._failed(self._queue[:len(batch) - (self._removed - before)], down)
            return False
        return True

    async def _commit_entries(self, entries: list[Entry]) -> None:
        await self._store.record_spend([row for row, _ in entries])

    def _now(self) -> float:
        return self._loop.time() if self._loop is not None else float("-inf")

    def _committed(self, batch: list[Entry]) -> None:
        self.commits += 1
        self._answered(batch)

    def _refused(self, entry: Entry, exc: Exception) -> None:
        self.refused += 1
        self._on_error()
        log_refused(entry[0], exc)
        self._answered([entry])  # the database answered: its request goes on, the store is not failing

    def _answered(self, batch: list[Entry]) -> None:
        """`batch`, the queue's front, is committed or refused: off the queue, its requests released."""
        del self._queue[:len(batch)]
        self._removed += len(batch)
        if self._journal is not None:
            self._keep_journal_small(self._journal)
        self._on_pending(len(self._queue))
        if self.failing:
            self.failing = False
            log.info("ledger_recovered")
        # a future shared with rows still queued (a batch cut at MAX_BATCH) waits for their commit
        _release(batch, self._queue[0][1] if self._queue else None)
        if self._deadline is not None:  # the store answers: the next waiter starts a new wait
            self._deadline.cancel()
            self._deadline = None
            if self._queue and self._loop is not None:  # rows queued meanwhile: their own bound
                self._deadline = self._loop.call_later(self._wait_s, self._expire)

    def _failed(self, batch: list[Entry], exc: StoreUnavailable) -> None:
        self._on_error()
        if not self.failing:
            self.failing = True
            log.warning("ledger_unavailable", reason=str(exc), queued=len(self._queue),
                        message="spend rows are kept in memory and retried")
        _release(batch)  # the requests go on; their rows stay queued
        over = len(self._queue) - self._max_backlog
        if over > 0:
            self.dropped += over
            del self._queue[:over]
            self._removed += over
        if self._journal is not None:  # the store down for long: the journal holds no more than the queue
            self._keep_journal_small(self._journal)
            log.error("ledger_rows_dropped", count=over)
        self._on_pending(len(self._queue))

    def _expire(self) -> None:
        """`wait_s` since the first waiter and no commit since: stop every request waiting, and mark the
        store failing, so later requests do not wait at all until a commit succeeds (a hung database
        costs one wait, not one per answer: docs/keys-teams-spend.md, "When the store is down")."""
        self._deadline = None
        self._waiters = None
        if not self.failing:
            self.failing = True
            self._on_error()
            log.warning("ledger_unavailable", reason="a commit missed its wait", queued=len(self._queue),
                        message="requests stop waiting for the ledger; its rows are kept in memory and retried")
        self._on_pending(len(self._queue))
        _release(self._queue)

    async def close(self) -> None:
        """Let the commit in flight end (never cancelled: its driver call would go on without us), then
        commit what is left; a failing store is tried once more, not retried."""
        self._closed = True
        if self._writer is not None:
            await asyncio.wait([self._writer])
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        await self.flush()  # a drained shutdown loses nothing the store can take
        _release(self._queue)
        if self._journal is not None:  # what the store did not take stays for the next start
            self._journal.close(remove=not self._queue)

    async def settle(self) -> None:
        """Every row queued before the call is committed when this returns, unless the store fails: a
        spend query sees this process's requests so far (journaled rows are otherwise committed within
        `JOURNAL_COMMIT_EVERY_S`)."""
        target = self._removed + len(self._queue)
        while self._removed < target and not self.failing and not self._closed:
            if self._writer is not None:  # it retries for as long as the store is down: look again
                await asyncio.wait([self._writer], timeout=RETRY_S)
            else:
                self._commit()  # here, or it hands the queue to the writer

    def _keep_journal_small(self, journal: SpendJournal) -> None:
        if not self._queue:
            journal.empty()
        elif journal.size > self._max_journal_bytes:
            journal.rewrite(row for row, _ in self._queue)


async def isolate(commit: Callable[[list[E]], Awaitable[None]], items: list[E], exc: Exception,
                  committed: Callable[[list[E]], None], refused: Callable[[E, Exception], None]) -> None:
    """`items`, whose commit failed with `exc`, committed in halves, in their order, until each row that
    fails is alone: every piece committed goes to `committed`, every row that fails to `refused`. A
    StoreUnavailable ends it, the pieces not committed yet neither committed nor refused."""
    failed: Exception | None = exc
    pieces = [items]
    while pieces:
        piece = pieces.pop()
        if failed is None:
            try:
                await commit(piece)
            except StoreUnavailable:
                raise
            except Exception as why:  # the database's refusal, or a bug: the same, row by row
                failed = why
            else:
                committed(piece)
                continue
        if len(piece) == 1:
            refused(piece[0], failed)
        else:
            half = len(piece) // 2
            pieces += (piece[half:], piece[:half])  # the first half on top: the queue's order kept
        failed = None


async def commit_or_drop(store: Store, rows: list[SpendRow], on_refused: Callable[[], None]) -> None:
    """`store.record_spend` of `rows` without those the database refuses (logged, `on_refused` for each):
    the journal's replay at start, which a row that can never be committed must not stop. Raises
    StoreUnavailable."""
    def refused(row: SpendRow, exc: Exception) -> None:
        on_refused()
        log_refused(row, exc)

    try:
        await store.record_spend(rows)
    except StoreUnavailable:
        raise
    except Exception as exc:  # a row it refuses, or a bug
        await isolate(store.record_spend, rows, exc, lambda piece: None, refused)


def log_refused(row: SpendRow, exc: Exception) -> None:
    """One line per row dropped: its request id and the error's class, never a value of the row (the
    store's own errors name only the driver's class)."""
    rid = row.request_id  # made printable: it may be the very value refused (a journal's line)
    request_id = "".join(c if c.isprintable() else "?" for c in rid[:128]) if isinstance(rid, str) else None
    log.error("ledger_row_refused", request_id=request_id,
              reason=str(exc) if isinstance(exc, StoreError) else type(exc).__name__,
              message="the database refuses this spend row: it is dropped, the rest of its batch is committed")


def _release(batch: list[Entry], keep: asyncio.Future[None] | None = None) -> None:
    """Wake the requests waiting on `batch`'s rows: their futures come in runs, one per batch of waiters
    (journaled rows have none), so the distinct ones are few and gathered without a Python step a row."""
    for fut in dict.fromkeys(map(itemgetter(1), batch)):
        if fut is not None and fut is not keep and not fut.done():
            fut.set_result(None)
