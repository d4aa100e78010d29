"""Keys, teams, the spend ledger and the audit log in a database (docs/keys-teams-spend.md): SQLite (the embedded
default) and PostgreSQL behind one `Store`, versioned migrations, each replica's `KeyCache` kept in step
by `StoreSync`, and the `SpendLedger`'s group commit. The request path reads the cache and, with a
SQLite store, appends its ledger row to the ledger's journal (`journal.py`) and waits for nothing; with
PostgreSQL it awaits only its own row's group commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from gateway.config.types import StoreConfig
from gateway.store.cache import KeyCache
from gateway.store.journal import SpendJournal, replay
from gateway.store.ledger import SpendLedger, commit_or_drop
from gateway.store.store import Store
from gateway.store.sync import StoreSync
from gateway.store.types import StoreError, StoreUnavailable

__all__ = ["ControlPlane", "KeyCache", "SpendLedger", "Store", "StoreError", "StoreHooks", "StoreUnavailable"]
log = structlog.get_logger("gateway")


@dataclass(frozen=True, slots=True)
class StoreHooks:
    """What the store reports (the metrics are observe/'s): its health, and each failed operation."""

    health: Callable[[bool], None]
    error: Callable[[str], None]  # the operation: refresh (a row skipped counts once per change), ledger, admin
    pending: Callable[[int], None] = lambda rows: None  # the ledger's rows not yet committed, after each commit
    shadowed: Callable[[int], None] = lambda keys: None  # stored keys refused for a clash with a config key


async def _journal(store: Store, setting: str, on_refused: Callable[[], None]) -> SpendJournal | None:
    """This process's ledger journal, once the rows of any process that died with one are committed (but
    those the database refuses: dropped, `on_refused` for each, so that one cannot stop every start)."""
    directory = store.journal_dir(setting)
    if directory is None:
        return None
    try:
        await replay(directory, lambda rows: commit_or_drop(store, rows, on_refused))
        return SpendJournal.create(directory)
    except OSError as exc:  # the directory cannot be read or written: safe, only slower
        log.warning("ledger_journal_failed", reason=type(exc).__name__, directory=str(directory),
                    message="requests wait for their ledger commit")
        return None


class ControlPlane:
    """The store and what each replica runs beside it; `start` migrates, loads the cache, and starts the
    poll (and LISTEN) and the ledger's writer."""

    def __init__(self, config: StoreConfig, hooks: StoreHooks):
        assert config.url is not None
        self.config, self.hooks = config, hooks
        self.cache = KeyCache(on_shadowed=hooks.shadowed)
        self._store: Store | None = None
        self._sync: StoreSync | None = None
        self._ledger: SpendLedger | None = None

    async def start(self) -> None:
        """Raises a StoreError when the store cannot be reached or migrated (StoreUnavailable), or refuses a
        migration's data (StoreRefused, Conflict)."""
        cfg = self.config
        assert cfg.url is not None
        store = self._store = await Store.open(cfg.url, cfg.connect_timeout_s)
        applied = await store.migrate()
        if applied:
            log.info("store_migrated", versions=applied, dialect=store.dialect)
        hooks = self.hooks

        def health(up: bool) -> None:
            if not up:
                hooks.error("refresh")
            hooks.health(up)

        listen = cfg.url if store.dialect == "postgresql" else None
        self._sync = StoreSync(store, self.cache, cfg.poll_s, health, listen, cfg.connect_timeout_s,
                               on_error=hooks.error)
        await self._sync.start()
        def ledger_error() -> None:
            hooks.error("ledger")

        self._ledger = SpendLedger(store, cfg.ledger_wait_s, ledger_error,
                                   journal=await _journal(store, cfg.ledger_journal, ledger_error),
                                   on_pending=hooks.pending)
        self._ledger.start()

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the control plane has not started")
        return self._store

    @property
    def ledger(self) -> SpendLedger:
        if self._ledger is None:
            raise RuntimeError("the control plane has not started")
        return self._ledger

    async def changed(self) -> None:
        """After this replica's own admin write: its cache follows at once (others within `poll_s`)."""
        if self._sync is not None:
            await self._sync.refresh()

    async def close(self) -> None:
        if self._sync is not None:
            await self._sync.close()
        if self._ledger is not None:
            await self._ledger.close()
        if self._store is not None:
            await self._store.close()
