"""Spend belongs to a key's id, not its name, on a real SQLite file and a real PostgreSQL server: a store
of the version before keys had ids migrates (the key that has a name now gets the rows written since it
was created, a revoked predecessor's keep none), and the spend budgets start from is counted per
`ApiKey.counter`, so a new key under a revoked key's name starts at zero."""

from __future__ import annotations

from gateway.config.types import ApiKey
from gateway.store import Store
from gateway.store.db import Tx
from gateway.store.migrations import MIGRATIONS
from gateway.store.types import Actor, SpendQuery, SpendRow, StoredKey


def _row(row_id: str, key: str, ts: float, key_id: str | None = None, cost: float = 1.0) -> SpendRow:
    return SpendRow(row_id, f"r-{row_id}", ts, "2026-12-06", key, None, "m", "p/m", "chat", "ok",
                    cost_usd=cost, key_id=key_id)


async def _version_one(url: str) -> Store:
    """A store as the version before key ids left it: migration 1 only."""
    store = await Store.open(url)
    version, statements = MIGRATIONS[0]

    async def run(tx: Tx) -> None:
        await tx.exec("CREATE TABLE gw_schema (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
        id_col = "BIGSERIAL PRIMARY KEY" if store.dialect == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
        for sql in statements:
            await tx.exec(sql.replace("{id}", id_col))
        await tx.exec("INSERT INTO gw_schema (version, applied_at) VALUES (?, 0)", (version,))
        await tx.exec("INSERT INTO gw_keys (name, budget_period, metadata, created_at) VALUES ('alice', 'day', "
                      "'{}', 2000)")
        cols = ("row_id, request_id, ts, day, key_name, team, model, deployment, api, outcome, input_tokens, "
                "output_tokens, cached_input_tokens, cache_creation_input_tokens, reasoning_tokens, cost_usd")
        for row_id, ts in (("before", 1000.0), ("after", 3000.0)):  # a revoked predecessor's, then alice's
            await tx.exec(f"INSERT INTO gw_spend ({cols}) VALUES (?, ?, ?, '2026-12-06', 'alice', NULL, 'm', "
                          "NULL, 'chat', 'ok', 0, 0, 0, 0, 0, 1.0)", (row_id, row_id, ts))

    await store._db.transact(run)  # the schema as it was: no API of today's store writes it
    return store


async def test_a_store_without_key_ids_migrates_and_keeps_each_keys_own_spend(store_url: str) -> None:
    store = await _version_one(store_url)
    assert await store.migrate() == [2, 3, 4]
    [alice] = (await store.list_keys())[0]
    assert alice.id == "legacy-alice"
    totals = await store.spend(SpendQuery(group_by=("key",)))
    assert sorted(((t.group[1][1] or ""), t.requests) for t in totals) == [("", 1), ("legacy-alice", 1)]
    assert (await store.period_spend("2026-12-06")).keys == {"alice": 1.0, "key/legacy-alice": 1.0}
    await store.close()


async def test_budgets_start_from_each_keys_own_spend_not_its_names(store_url: str) -> None:
    store = await Store.open(store_url)
    await store.migrate()
    actor = Actor("ops", 1000.0)
    old = StoredKey("alice", created_at=1000.0, id="k-old")
    await store.create_key(actor, old, "a" * 64)
    await store.record_spend([_row("1", "alice", 1001.0, "k-old", 2.0), _row("2", "cfg", 1002.0)])
    await store.delete_key(actor, "alice")
    new = StoredKey("alice", created_at=1003.0, id="k-new")
    await store.create_key(actor, new, "b" * 64)
    spent = (await store.period_spend("2026-12-06")).keys
    assert spent == {"key/k-old": 2.0, "cfg": 1.0}  # the new alice has spent nothing
    assert ApiKey(name="alice", id="k-new").counter not in spent
    assert ApiKey(name="cfg").counter == "cfg"  # a config key counts by its name
    await store.close()
