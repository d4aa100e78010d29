"""Versioned schema migrations, applied in order at start (`gateway serve`) or by `gateway migrate`.

Each is applied once, in one transaction, under a lock (SQLite: the write lock; PostgreSQL: an advisory
lock), so replicas starting together apply each version exactly once. Never edit a shipped migration:
add the next one.
"""

from __future__ import annotations

from gateway.store.db import Database, Tx

_LOCK = 4_207_331  # pg_advisory_xact_lock id of this schema

# (version, statements); `{id}` is the dialect's auto-increment primary key
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, (
        "CREATE TABLE gw_meta (id INTEGER PRIMARY KEY, version BIGINT NOT NULL)",
        "INSERT INTO gw_meta (id, version) VALUES (1, 0)",
        """CREATE TABLE gw_teams (name TEXT PRIMARY KEY, models TEXT, rpm BIGINT, tpm BIGINT,
            budget_usd DOUBLE PRECISION, budget_period TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE gw_keys (name TEXT PRIMARY KEY, team TEXT, models TEXT, rpm BIGINT, tpm BIGINT,
            budget_usd DOUBLE PRECISION, budget_period TEXT NOT NULL, expires_at DOUBLE PRECISION,
            metadata TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE gw_key_secrets (digest TEXT PRIMARY KEY, key_name TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION)""",
        "CREATE INDEX gw_key_secrets_key ON gw_key_secrets (key_name)",
        """CREATE TABLE gw_spend (row_id TEXT PRIMARY KEY, request_id TEXT NOT NULL,
            ts DOUBLE PRECISION NOT NULL, day TEXT NOT NULL, key_name TEXT, team TEXT, model TEXT NOT NULL,
            deployment TEXT, api TEXT NOT NULL, outcome TEXT NOT NULL, input_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL, cached_input_tokens BIGINT NOT NULL,
            cache_creation_input_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
            cost_usd DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX gw_spend_day ON gw_spend (day)",
        """CREATE TABLE gw_audit (id {id}, ts DOUBLE PRECISION NOT NULL, admin TEXT NOT NULL,
            action TEXT NOT NULL, target TEXT NOT NULL, detail TEXT NOT NULL)""",
    )),
    # keys get an id of their own and ledger rows carry it: spend belongs to a key, not to its name, which
    # a new key may reuse after a revocation. The rows of the key that has the name now (from its
    # creation on) are its own; those of a revoked predecessor keep no id.
    (2, (
        "ALTER TABLE gw_keys ADD COLUMN id TEXT",
        "UPDATE gw_keys SET id = 'legacy-' || name WHERE id IS NULL",
        "CREATE UNIQUE INDEX gw_keys_id ON gw_keys (id)",
        "ALTER TABLE gw_spend ADD COLUMN key_id TEXT",
        """UPDATE gw_spend SET key_id = (SELECT k.id FROM gw_keys k WHERE k.name = gw_spend.key_name
            AND gw_spend.ts >= k.created_at) WHERE key_name IS NOT NULL""",
    )),
    # identity (docs/identity.md): admin keys kept in the store with a role, the audit log's rows carry the
    # team of what they changed (a team admin reads its own team's), spend rows the IdP token's subject
    (3, (
        """CREATE TABLE gw_admin_keys (name TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, role TEXT NOT NULL,
            team TEXT, created_at DOUBLE PRECISION NOT NULL)""",
        "ALTER TABLE gw_audit ADD COLUMN team TEXT",
        "ALTER TABLE gw_spend ADD COLUMN subject TEXT",
    )),
    # teams get an id of their own and ledger rows carry it, as keys did in 2: a team deleted and created
    # again under its name starts with no spend (docs/keys-teams-spend.md, "Spend belongs to a key's or a
    # team's id"). Teams that exist now keep no id and count under their name, so their budgets carry on
    # through the upgrade; their rows keep no id, which a re-created team's never lack.
    (4, (
        "ALTER TABLE gw_teams ADD COLUMN id TEXT",
        "CREATE UNIQUE INDEX gw_teams_id ON gw_teams (id)",
        "ALTER TABLE gw_spend ADD COLUMN team_id TEXT",
    )),
)
LATEST = MIGRATIONS[-1][0]
_ID = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgresql": "BIGSERIAL PRIMARY KEY"}


async def migrate(db: Database) -> list[int]:
    """Apply what is missing; the versions applied now (empty: the schema was current)."""

    async def run(tx: Tx) -> list[int]:
        if db.dialect == "postgresql":
            await tx.rows(f"SELECT pg_advisory_xact_lock({_LOCK})")
        await tx.exec("CREATE TABLE IF NOT EXISTS gw_schema (version INTEGER PRIMARY KEY, "
                      "applied_at DOUBLE PRECISION NOT NULL)")
        done = {int(r[0]) for r in await tx.rows("SELECT version FROM gw_schema")}
        applied: list[int] = []
        for version, statements in MIGRATIONS:
            if version in done:
                continue
            for sql in statements:
                await tx.exec(sql.replace("{id}", _ID[db.dialect]))
            await tx.exec("INSERT INTO gw_schema (version, applied_at) VALUES (?, ?)",
                          (version, _now()))
            applied.append(version)
        return applied

    return await db.transact(run)


def _now() -> float:
    import time

    return time.time()
