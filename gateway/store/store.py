"""The store: keys, teams, the spend ledger and the audit log, on SQLite or PostgreSQL (docs/keys-teams-spend.md).

One class over the `Database` seam; every admin write runs in one transaction with its audit row and a
bump of the version row that every replica polls (and, on PostgreSQL, a NOTIFY), so caches follow.
Connections by role: admin writes and snapshots on one, the ledger's group commits on another, so a
slow admin query never delays a response's last byte.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from gateway.config.types import key_counter, team_counter
from gateway.store import rows as parse
from gateway.store.admin_keys import AdminKeys
from gateway.store.db import Database, Tx, open_database, refused
from gateway.store.migrations import migrate
from gateway.store.spend_sql import spend_sql, spend_totals
from gateway.store.types import (
    Actor,
    AuditEntry,
    Conflict,
    Invalid,
    Limits,
    Missing,
    Page,
    PeriodSpend,
    SkippedRow,
    Snapshot,
    SpendQuery,
    SpendRow,
    SpendTotal,
    StoredKey,
    Team,
    Unparsable,
)

T = TypeVar("T")
FIRST_PAGE = Page()
CHANNEL = "gw_changes"
_KEY_COLS = "name, team, models, rpm, tpm, budget_usd, budget_period, expires_at, metadata, created_at, id"
_TEAM_COLS = "name, models, rpm, tpm, budget_usd, budget_period, created_at, id"
_TEAM_IN_USE = "SELECT 1 FROM gw_keys WHERE team = ? UNION ALL SELECT 1 FROM gw_admin_keys WHERE team = ?"
# in SpendRow's field order: a row is its own parameters
_SPEND_COLS = ("row_id, request_id, ts, day, key_name, team, model, deployment, api, outcome, input_tokens, "
               "output_tokens, cached_input_tokens, cache_creation_input_tokens, reasoning_tokens, cost_usd, key_id, "
               "subject, team_id")
_SPEND_INSERT = (f"INSERT INTO gw_spend ({_SPEND_COLS}) VALUES ({', '.join('?' * 19)}) "
                 "ON CONFLICT (row_id) DO NOTHING")
# PostgreSQL: the batch as one JSON parameter (an array of rows, each an array in column order), expanded
# by the server: one round trip, and one text parameter to encode (orjson) instead of a value each
_SPEND_PG_TYPES = ("text",) * 2 + ("float8",) + ("text",) * 7 + ("int8",) * 5 + ("float8",) + ("text",) * 3
_SPEND_INSERT_PG = (f"INSERT INTO gw_spend ({_SPEND_COLS}) SELECT "
                    + ", ".join(f"(e->>{i})::{t}" for i, t in enumerate(_SPEND_PG_TYPES))
                    + " FROM json_array_elements(?::json) AS e ON CONFLICT (row_id) DO NOTHING")


class Store:
    def __init__(self, main: Database, ledger: Database):
        self._db, self._ledger = main, ledger
        self.dialect = main.dialect
        self.admin_keys = AdminKeys(main, self._changed)

    @classmethod
    async def open(cls, url: str, connect_timeout_s: float = 5.0) -> Store:
        return cls(await open_database(url, connect_timeout_s), await open_database(url, connect_timeout_s))

    def journal_dir(self, setting: str) -> Path | None:
        """Where the spend ledger journals its rows (`journal.py`), from `store.ledger_journal`: "auto"
        is beside a SQLite file, and none for a server, whose replicas' disks may not outlive them."""
        if setting == "off":
            return None
        if setting != "auto":
            return Path(setting)
        path = self._ledger.local_path
        return None if path is None or path.endswith(":memory:") else Path(path + ".ledger")

    async def migrate(self) -> list[int]:
        return await migrate(self._db)

    async def close(self) -> None:
        await self._db.close()
        await self._ledger.close()

    # -- what replicas cache ----------------------------------------------------------------------

    async def version(self) -> int:
        async def run(tx: Tx) -> int:
            return int((await tx.rows("SELECT version FROM gw_meta WHERE id = 1"))[0][0])

        return await self._db.transact(run, write=False)

    async def snapshot(self) -> Snapshot:
        async def run(tx: Tx) -> Snapshot:
            version = int((await tx.rows("SELECT version FROM gw_meta WHERE id = 1"))[0][0])
            skipped: list[SkippedRow] = []
            keys = _readable("gw_keys", parse.key, await tx.rows(f"SELECT {_KEY_COLS} FROM gw_keys"), skipped)
            secrets = _readable("gw_key_secrets", parse.secret,
                                await tx.rows("SELECT digest, key_name, expires_at FROM gw_key_secrets"), skipped)
            teams = _readable("gw_teams", parse.team, await tx.rows(f"SELECT {_TEAM_COLS} FROM gw_teams"), skipped)
            return Snapshot(version, tuple(keys), tuple(secrets), tuple(teams), tuple(skipped))

        return await self._db.transact(run, write=False)

    # -- keys -------------------------------------------------------------------------------------

    async def create_key(self, actor: Actor, key: StoredKey, digest: str) -> None:
        async def run(tx: Tx) -> None:
            if await tx.rows("SELECT 1 FROM gw_keys WHERE name = ?", (key.name,)):
                raise Conflict(f"a key named {key.name} exists")
            await _check_team(tx, key.team)
            await tx.exec(f"INSERT INTO gw_keys ({_KEY_COLS}) VALUES ({', '.join('?' * 11)})", _key_row(key))
            await tx.exec("INSERT INTO gw_key_secrets (digest, key_name, created_at, expires_at) "
                          "VALUES (?, ?, ?, NULL)", (digest, key.name, actor.now))
            await self._changed(tx, actor, "key.create", key.name, _limits_detail(key.limits, team=key.team),
                                key.team)

        await self._db.transact(run)

    async def list_keys(self, page: Page = FIRST_PAGE, team: str | None = None) -> tuple[list[StoredKey], bool]:
        """One page by name (of `team`'s keys), unreadable rows left out (the sync logs them); has more."""
        return await self._page(f"SELECT {_KEY_COLS} FROM gw_keys", "gw_keys", parse.key, page, team)

    async def get_key(self, name: str) -> StoredKey:
        async def run(tx: Tx) -> StoredKey:
            rows = await tx.rows(f"SELECT {_KEY_COLS} FROM gw_keys WHERE name = ?", (name,))
            if not rows:
                raise Missing(f"no key named {name}")
            return _one("key", name, parse.key, rows[0])

        return await self._db.transact(run, write=False)

    async def update_key(self, actor: Actor, key: StoredKey, changed: dict[str, Any]) -> None:
        async def run(tx: Tx) -> None:
            await _check_team(tx, key.team)
            row = _key_row(key)
            n = await tx.exec("UPDATE gw_keys SET team = ?, models = ?, rpm = ?, tpm = ?, budget_usd = ?, "
                              "budget_period = ?, expires_at = ?, metadata = ? WHERE name = ?", (*row[1:9], key.name))
            if n == 0:
                raise Missing(f"no key named {key.name}")
            await self._changed(tx, actor, "key.update", key.name, changed, key.team)

        await self._db.transact(run)

    async def delete_key(self, actor: Actor, name: str) -> None:
        async def run(tx: Tx) -> None:
            team = await _team_of_key(tx, name)
            await tx.exec("DELETE FROM gw_keys WHERE name = ?", (name,))
            await tx.exec("DELETE FROM gw_key_secrets WHERE key_name = ?", (name,))
            await self._changed(tx, actor, "key.revoke", name, {}, team)

        await self._db.transact(run)

    async def rotate_key(self, actor: Actor, name: str, digest: str, grace_s: float) -> None:
        """A new secret; the key's others stay valid `grace_s` longer (0: end now)."""

        async def run(tx: Tx) -> None:
            team = await _team_of_key(tx, name)
            if grace_s <= 0:
                await tx.exec("DELETE FROM gw_key_secrets WHERE key_name = ?", (name,))
            else:
                until = actor.now + grace_s
                await tx.exec("UPDATE gw_key_secrets SET expires_at = ? WHERE key_name = ? AND "
                              "(expires_at IS NULL OR expires_at > ?)", (until, name, until))
                await tx.exec("DELETE FROM gw_key_secrets WHERE key_name = ? AND expires_at <= ?", (name, actor.now))
            await tx.exec("INSERT INTO gw_key_secrets (digest, key_name, created_at, expires_at) "
                          "VALUES (?, ?, ?, NULL)", (digest, name, actor.now))
            await self._changed(tx, actor, "key.rotate", name, {"grace_s": grace_s}, team)

        await self._db.transact(run)

    # -- teams ------------------------------------------------------------------------------------

    async def create_team(self, actor: Actor, team: Team) -> None:
        async def run(tx: Tx) -> None:
            if await tx.rows("SELECT 1 FROM gw_teams WHERE name = ?", (team.name,)):
                raise Conflict(f"a team named {team.name} exists")
            await tx.exec(f"INSERT INTO gw_teams ({_TEAM_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _team_row(team))
            await self._changed(tx, actor, "team.create", team.name, _limits_detail(team.limits), team.name)

        await self._db.transact(run)

    async def list_teams(self, page: Page = FIRST_PAGE) -> tuple[list[Team], bool]:
        return await self._page(f"SELECT {_TEAM_COLS} FROM gw_teams", "gw_teams", parse.team, page)

    async def _page(self, select: str, table: str, read: Callable[[tuple[Any, ...]], T],
                    page: Page, team: str | None = None) -> tuple[list[T], bool]:
        """Rows by name after `page.after`, `page.limit` readable ones at most, and whether more follow;
        fetched a page at a time until it is full, so rows that cannot be read never end a listing."""
        out: list[T] = []
        after = page.after

        async def run(tx: Tx) -> list[tuple[Any, ...]]:
            where = " WHERE name > ?" if after is not None else " WHERE name IS NOT NULL"
            params: tuple[Any, ...] = (after,) if after is not None else ()
            if team is not None:
                where, params = where + " AND team = ?", (*params, team)
            return await tx.rows(select + where + " ORDER BY name LIMIT ?", (*params, page.limit + 1))

        while True:
            rows = await self._db.transact(run, write=False)
            for r in rows:
                if len(out) == page.limit:
                    return out, True  # a row follows the full page
                after = r[0]
                out.extend(_readable(table, read, [r], []))
            if len(rows) <= page.limit:
                return out, False

    async def get_team(self, name: str) -> Team:
        async def run(tx: Tx) -> Team:
            rows = await tx.rows(f"SELECT {_TEAM_COLS} FROM gw_teams WHERE name = ?", (name,))
            if not rows:
                raise Missing(f"no team named {name}")
            return _one("team", name, parse.team, rows[0])

        return await self._db.transact(run, write=False)

    async def update_team(self, actor: Actor, team: Team, changed: dict[str, Any]) -> None:
        async def run(tx: Tx) -> None:
            row = _team_row(team)
            n = await tx.exec("UPDATE gw_teams SET models = ?, rpm = ?, tpm = ?, budget_usd = ?, budget_period = ? "
                              "WHERE name = ?", (*row[1:6], team.name))
            if n == 0:
                raise Missing(f"no team named {team.name}")
            await self._changed(tx, actor, "team.update", team.name, changed, team.name)

        await self._db.transact(run)

    async def delete_team(self, actor: Actor, name: str) -> None:
        async def run(tx: Tx) -> None:
            if await tx.rows(_TEAM_IN_USE, (name, name)):  # its team admins, left, would govern a namesake
                raise Conflict(f"team {name} still has keys or team admin keys: move or revoke them first")
            if await tx.exec("DELETE FROM gw_teams WHERE name = ?", (name,)) == 0:
                raise Missing(f"no team named {name}")
            await self._changed(tx, actor, "team.delete", name, {}, name)

        await self._db.transact(run)

    # -- ledger and audit -------------------------------------------------------------------------

    async def record_spend(self, rows: list[SpendRow]) -> None:
        """One transaction for the batch; a row already there (same `row_id`) is left as it is. A value the
        database refuses (the batch then writes nothing) raises `StoreRefused`."""
        if self.dialect == "postgresql":
            try:
                batch = orjson.dumps([tuple(r) for r in rows]).decode()
            except orjson.JSONEncodeError as exc:  # a lone surrogate, an integer over 64 bits: refused as such
                raise refused(exc) from None
            await self._ledger.statement(_SPEND_INSERT_PG, (batch,))
        else:
            await self._ledger.batch(_SPEND_INSERT, rows)

    def record_spend_now(self, rows: list[SpendRow]) -> bool:
        """`record_spend` done before returning, where the driver can do it without waiting (SQLite with
        its write lock free); False, with nothing written, where it cannot."""
        return self._ledger.batch_now(_SPEND_INSERT, rows)

    async def spend(self, q: SpendQuery) -> list[SpendTotal]:
        groups, sql, params = spend_sql(q)

        async def run(tx: Tx) -> list[SpendTotal]:
            return spend_totals(q, groups, await tx.rows(sql, params))

        return await self._db.transact(run, write=False)

    async def period_spend(self, since: str, exclude_row_prefix: str | None = None) -> PeriodSpend:
        """Spend from day `since` on, per key and per team, by their state counters (budgets start from it);
        rows whose id starts with `exclude_row_prefix` (one process's own, `pipeline/ids.py`) left out."""
        sql = "SELECT key_name, key_id, team, team_id, SUM(cost_usd) FROM gw_spend WHERE day >= ?"
        params = [since]
        if exclude_row_prefix is not None:
            sql += " AND row_id NOT LIKE ?"
            params.append(exclude_row_prefix + "%")  # hex digits: no LIKE wildcard in it
        sql += " GROUP BY key_name, key_id, team, team_id"

        async def run(tx: Tx) -> PeriodSpend:
            out = PeriodSpend(since)
            for key, key_id, team, team_id, cost in await tx.rows(sql, params):
                usd = float(cost or 0.0)
                if key is not None:  # by the key's state counter: its id, so a reused name starts at 0
                    counter = key_counter(key, key_id)
                    out.keys[counter] = out.keys.get(counter, 0.0) + usd
                if team is not None:  # the same for a team: a re-created one starts at 0
                    counter = team_counter(team, team_id)
                    out.teams[counter] = out.teams.get(counter, 0.0) + usd
            return out

        return await self._db.transact(run, write=False)

    async def audit(self, page: Page = FIRST_PAGE, team: str | None = None) -> tuple[list[AuditEntry], bool]:
        """Newest first, after `page.after` (the last id seen); `team`: entries about its objects only, since
        it was created (a team deleted and created again under its name does not inherit its predecessor's)."""
        where: list[str] = []
        params: list[int | str] = []
        if page.after is not None:
            where.append("id < ?")
            params.append(int(page.after))
        # from the creation of the team that has the name now, never a deleted namesake's; a team with no row
        # (only in the config) keeps all its entries
        if team is not None:
            where.append("team = ? AND ts >= COALESCE((SELECT created_at FROM gw_teams WHERE name = ?), 0)")
            params.extend((team, team))
        sql = ("SELECT ts, admin, action, target, detail, id, team FROM gw_audit"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC LIMIT ?")

        async def run(tx: Tx) -> list[tuple[Any, ...]]:
            return await tx.rows(sql, (*params, page.limit + 1))

        rows = await self._db.transact(run, write=False)
        return [AuditEntry(float(r[0]), r[1], r[2], r[3], r[4], int(r[5]), r[6]) for r in rows[:page.limit]], \
            len(rows) > page.limit

    async def _changed(self, tx: Tx, actor: Actor, action: str, target: str, detail: dict[str, Any],
                       team: str | None = None) -> None:
        await tx.exec("INSERT INTO gw_audit (ts, admin, action, target, detail, team) VALUES (?, ?, ?, ?, ?, ?)",
                      (actor.now, actor.admin, action, target, orjson.dumps(detail).decode(), team))
        await tx.exec("UPDATE gw_meta SET version = version + 1 WHERE id = 1")
        if self.dialect == "postgresql":
            await tx.rows(f"SELECT pg_notify('{CHANNEL}', '')")


async def _team_of_key(tx: Tx, name: str) -> str | None:
    if not (rows := await tx.rows("SELECT team FROM gw_keys WHERE name = ?", (name,))):
        raise Missing(f"no key named {name}")
    return rows[0][0] if isinstance(rows[0][0], str) else None


async def _check_team(tx: Tx, team: str | None) -> None:
    if team is not None and not await tx.rows("SELECT 1 FROM gw_teams WHERE name = ?", (team,)):
        raise Invalid(f"no team named {team}", param="team")


def _models_json(models: tuple[str, ...] | None) -> str | None:
    return None if models is None else orjson.dumps(list(models)).decode()


def _readable(table: str, read: Callable[[tuple[Any, ...]], T], rows: list[tuple[Any, ...]],
              skipped: list[SkippedRow]) -> list[T]:
    """`read` of each row; the ones it cannot read go to `skipped` instead."""
    out: list[T] = []
    for r in rows:
        try:
            out.append(read(r))
        except parse.Unreadable as exc:
            name = r[1] if table == "gw_key_secrets" else r[0]  # a secret by its key's name, never its digest
            skipped.append(SkippedRow(table, _printable(name), exc.column, exc.reason, hash(repr(r))))
    return out


def _one(kind: str, name: str, read: Callable[[tuple[Any, ...]], T], row: tuple[Any, ...]) -> T:
    try:
        return read(row)
    except parse.Unreadable as exc:
        raise Unparsable(f"the stored {kind} {name} cannot be read ({exc}): delete it, or fix it in the "
                         "database") from None


def _printable(v: Any) -> str:
    s = v if isinstance(v, str) else repr(v)
    return "".join(c if c.isprintable() else "?" for c in s[:64])


def _key_row(k: StoredKey) -> tuple[Any, ...]:
    lim = k.limits
    return (k.name, k.team, _models_json(lim.models), lim.rpm, lim.tpm, lim.budget_usd, lim.budget_period,
            k.expires_at, k.metadata, k.created_at, k.id)


def _team_row(t: Team) -> tuple[Any, ...]:
    lim = t.limits
    return (t.name, _models_json(lim.models), lim.rpm, lim.tpm, lim.budget_usd, lim.budget_period, t.created_at, t.id)


def _limits_detail(lim: Limits, **extra: Any) -> dict[str, Any]:
    out = {"models": lim.models, "rpm": lim.rpm, "tpm": lim.tpm, "budget_usd": lim.budget_usd,
           "budget_period": lim.budget_period, **extra}
    return {k: v for k, v in out.items() if v is not None}
