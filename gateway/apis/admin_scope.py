"""A team admin's view of the control plane (docs/identity.md, "Admin roles"): its own team's objects
exist, every other team's answer 404 as if they did not; the keys it writes stay within its team's own
limits. Also `/admin/v1/me` and the stored admin keys (`/admin/v1/admin-keys`, admins only)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Collection
from typing import Any

from gateway.apis import admin_fields as f
from gateway.apis.admin_auth import STORED_ADMIN_KEY_PREFIX
from gateway.core.policy.roles import over_team_limit
from gateway.errors import InvalidRequest, NotFound
from gateway.http import Response, json_response
from gateway.pipeline.exchange import GatewayRequest
from gateway.store import ControlPlane
from gateway.store.admin_keys import StoredAdminKey
from gateway.store.types import Actor, Conflict, Limits, StoredKey

ADMIN_KEY_FIELDS = ("name", "role", "team")


def scope(actor: Actor) -> str | None:
    """The team a caller's lists and totals are narrowed to (None: every team)."""
    return actor.team if actor.role == "team_admin" else None


def visible(actor: Actor, team: str | None, what: str, name: str) -> None:
    """Raise the 404 of a missing object when `team`'s objects do not exist for this caller."""
    s = scope(actor)
    if s is not None and team != s:
        raise NotFound(f"no {what} named {name}")


async def team_key(cp: ControlPlane, actor: Actor, name: str) -> StoredKey:
    key = await cp.store.get_key(name)
    visible(actor, key.team, "key", name)
    return key


async def may_touch_key(cp: ControlPlane, actor: Actor, name: str) -> None:
    """Before a write that needs no read of the key (revoke, rotate): a team admin's check only, so an
    admin can still remove a row the gateway cannot read."""
    if scope(actor) is not None:
        await team_key(cp, actor, name)


def key_team(actor: Actor, asked: str | None) -> str | None:
    """The team a team admin's new or changed key is in: its own (the default), never another's."""
    s = scope(actor)
    if s is None:
        return asked
    team = asked if asked is not None else s
    visible(actor, team, "team", team)
    return team


async def within_team(cp: ControlPlane, actor: Actor, lim: Limits,
                      written: Collection[str] = f.LIMIT_FIELDS) -> None:
    """A team admin's key may not exceed its team's own limits (models, rpm, tpm, budget). A limit the
    key leaves out (None) is within: the team's applies to it anyway (a key in a team may use only the
    models both allow, `store/cache.py`). Only the fields in `written` (those the request sets) are
    checked, so a PATCH of one field is not refused for another that an admin set above the team's."""
    s = scope(actor)
    if s is None:
        return
    team = (await cp.store.get_team(s)).limits
    if "models" in written and team.models is not None and lim.models is not None \
            and not set(lim.models) <= set(team.models):
        raise InvalidRequest("models must be within the team's own models", param="models")
    for field in ("rpm", "tpm", "budget_usd"):
        if field in written and over_team_limit(getattr(lim, field), getattr(team, field)):
            raise InvalidRequest(f"{field} must not exceed the team's own {field}", param=field)


async def me(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    return json_response({"object": "gateway.admin", "name": actor.admin, "role": actor.role, "team": actor.team})


def admin_key_view(k: StoredAdminKey) -> dict[str, Any]:
    return {"object": "gateway.admin_key", "name": k.name, "role": k.role, "team": k.team,
            "created_at": f.iso(k.created_at)}


async def create_admin_key(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    data = f.json_object(request.body, ADMIN_KEY_FIELDS)
    name = f.name_of(data)
    role = data.get("role", "admin")
    if role not in ("admin", "team_admin", "viewer"):
        raise InvalidRequest("role must be admin, team_admin or viewer", param="role")
    team = f.team_of(data, None)
    if (role == "team_admin") != (team is not None):
        raise InvalidRequest("a team_admin needs its team; the other roles take none", param="team")
    if any(k.name == name for k in request.app.runtime.config.admin.keys):  # 409, as a stored one's
        raise Conflict(f"an admin key named {name} exists (in the config file)")
    secret = STORED_ADMIN_KEY_PREFIX + secrets.token_urlsafe(32)
    key = StoredAdminKey(name, role, team, actor.now)
    await cp.store.admin_keys.create(actor, key, hashlib.sha256(secret.encode()).hexdigest())
    return json_response({**admin_key_view(key), "key": secret}, status=201)


async def list_admin_keys(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    keys, more = await cp.store.admin_keys.list(f.page(f.query(request)))
    return json_response({"object": "list", "data": [admin_key_view(k) for k in keys], "has_more": more})


async def delete_admin_key(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    await cp.store.admin_keys.delete(actor, parts[1])
    return json_response({"object": "gateway.admin_key.deleted", "name": parts[1], "deleted": True})
