"""Admin keys kept in the store (`/admin/v1/admin-keys`, docs/identity.md): a name, a role (admin,
team_admin, viewer), a team admin's team, and the key's SHA-256 only. Created and revoked by an
`admin`, with an audit row each; looked up by digest on each control-plane request (admin requests are
few, so no cache: a revoked admin key stops working at once, on every replica)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.store.db import Database, Tx
from gateway.store.types import Actor, Conflict, Invalid, Missing, Page

Changed = Callable[[Tx, Actor, str, str, dict[str, Any], str | None], Awaitable[None]]
_ROLES = ("admin", "team_admin", "viewer")


@dataclass(frozen=True, slots=True)
class StoredAdminKey:
    name: str
    role: str
    team: str | None
    created_at: float


class AdminKeys:
    def __init__(self, db: Database, changed: Changed) -> None:
        self._db, self._changed = db, changed

    async def create(self, actor: Actor, key: StoredAdminKey, digest: str) -> None:
        async def run(tx: Tx) -> None:
            if await tx.rows("SELECT 1 FROM gw_admin_keys WHERE name = ?", (key.name,)):
                raise Conflict(f"an admin key named {key.name} exists")
            if key.team is not None and not await tx.rows("SELECT 1 FROM gw_teams WHERE name = ?", (key.team,)):
                raise Invalid(f"no team named {key.team}", param="team")  # a bad field, as on a gateway key
            await tx.exec("INSERT INTO gw_admin_keys (name, digest, role, team, created_at) VALUES (?, ?, ?, ?, ?)",
                          (key.name, digest, key.role, key.team, key.created_at))
            await self._changed(tx, actor, "admin_key.create", key.name, {"role": key.role, "team": key.team},
                                key.team)

        await self._db.transact(run)

    async def delete(self, actor: Actor, name: str) -> None:
        async def run(tx: Tx) -> None:
            rows = await tx.rows("SELECT team FROM gw_admin_keys WHERE name = ?", (name,))
            if not rows:
                raise Missing(f"no admin key named {name}")
            await tx.exec("DELETE FROM gw_admin_keys WHERE name = ?", (name,))
            await self._changed(tx, actor, "admin_key.revoke", name, {}, rows[0][0])

        await self._db.transact(run)

    async def list(self, page: Page) -> tuple[list[StoredAdminKey], bool]:
        async def run(tx: Tx) -> list[tuple[Any, ...]]:
            sql = "SELECT name, role, team, created_at FROM gw_admin_keys"
            if page.after is None:
                return await tx.rows(sql + " ORDER BY name LIMIT ?", (page.limit + 1,))
            return await tx.rows(sql + " WHERE name > ? ORDER BY name LIMIT ?", (page.after, page.limit + 1))

        rows = await self._db.transact(run, write=False)
        keys = [k for k in (_read(r) for r in rows[:page.limit]) if k is not None]
        return keys, len(rows) > page.limit

    async def find(self, digest: str) -> StoredAdminKey | None:
        """The admin key with this SHA-256 (hex), or None; a row with an unknown role is no key."""
        async def run(tx: Tx) -> list[tuple[Any, ...]]:
            return await tx.rows("SELECT name, role, team, created_at FROM gw_admin_keys WHERE digest = ?", (digest,))

        rows = await self._db.transact(run, write=False)
        return _read(rows[0]) if rows else None

    async def any(self) -> bool:
        async def run(tx: Tx) -> bool:
            return bool(await tx.rows("SELECT 1 FROM gw_admin_keys LIMIT 1"))

        return await self._db.transact(run, write=False)


def _read(r: tuple[Any, ...]) -> StoredAdminKey | None:
    name, role, team, created = r
    if not isinstance(name, str) or role not in _ROLES or (team is not None and not isinstance(team, str)):
        return None
    if (role == "team_admin") != (team is not None):
        return None
    return StoredAdminKey(name, role, team, float(created) if isinstance(created, int | float) else 0.0)
