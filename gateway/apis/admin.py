"""`/admin/v1`: the control plane (docs/keys-teams-spend.md), admin keys only.

Keys and teams are written to the store (each write with its audit row); this replica's cache follows at
once, the others within `store.poll_s` (or at once on PostgreSQL's NOTIFY). A created or rotated key's
secret is in the answer once and stored only as its SHA-256. The store down: 503, and the request path
goes on serving from the cache.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

import orjson
import structlog

from gateway.apis import admin_fields as f
from gateway.apis import admin_scope as s
from gateway.apis import admin_stats
from gateway.apis.admin_auth import admin_principal, control_plane, store_down
from gateway.config.control import IDP_PREFIX
from gateway.config.types import Config
from gateway.core.policy.roles import AdminPrincipal, may
from gateway.errors import GatewayError, InvalidRequest, MethodNotAllowed, NotFound
from gateway.http import Response, json_response
from gateway.observe.record import subject_hash
from gateway.pipeline.exchange import GatewayRequest
from gateway.store import ControlPlane
from gateway.store.types import (
    Actor,
    Conflict,
    Invalid,
    Limits,
    Missing,
    StoredKey,
    StoreRefused,
    StoreUnavailable,
    Team,
    Unparsable,
)

log = structlog.get_logger("gateway")
PREFIX = "/admin/v1/"
Handler = Callable[[GatewayRequest, ControlPlane, Actor, list[str]], Awaitable[Response]]


class NameTaken(GatewayError):
    status, type, code, outcome = 409, "invalid_request_error", "conflict", "client_error"


class ValueRefused(GatewayError):
    """The database refused a value of the request (SQLSTATE class 22 or 23 but a taken name, 54; SQLite's
    constraints): a limit of the database's own that the API does not know, such as a character outside a
    LATIN1 database's encoding or a constraint added by hand. The same request fails the same way every
    time, so it is the caller's to change, not a store outage (docs/keys-teams-spend.md, "Validation")."""

    status, type, code, outcome = 400, "invalid_request_error", "store_refused", "client_error"


class RowUnreadable(GatewayError):
    """A stored row written by hand or by an older version that cannot be read (never one this API wrote)."""

    status, type, code, outcome = 500, "api_error", "store_row_unreadable", "error"


# on every answer, an error's too: keys, spend and a new secret are never kept by a browser's or a proxy's
# cache, and a JSON answer is never sniffed as a page (docs/console.md, Security)
ANSWER_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


async def admin(request: GatewayRequest) -> Response:
    request.extra_headers.update(ANSWER_HEADERS)
    rt = request.app.runtime
    control = await control_plane(rt.config, rt.control)  # off: no admin API, and no line (an unknown route)
    parts = [unquote(p) for p in request.path[len(PREFIX):].split("/")]
    who: AdminPrincipal | None = None
    status = 500
    try:
        who = await admin_principal(rt.config, rt.keyring.jwt, control, request.headers)
        actor = Actor(admin=_audited(who), now=time.time(), role=who.role, team=who.team)
        route, handler = _handler(request.method, parts)
        if not may(who, route, request.method):
            raise Forbidden(f"the {who.role} role may not {request.method} /admin/v1/{route}")
        response = await handler(request, control, actor, parts)
        status = response.status
        return response
    except GatewayError as exc:
        status = exc.status
        raise
    except (Conflict, Missing, Invalid, StoreRefused, StoreUnavailable, Unparsable) as exc:
        status = _STATUS[type(exc)]
        raise _error(control, exc) from None
    except Exception as exc:  # a bug must cost one 500 in the API's shape, never the connection
        log.exception("admin_failed", route=_route_name(request.method, parts), error=type(exc).__name__)
        raise GatewayError("internal error of the control plane") from None
    finally:  # one line per admin request, a refused one too: who (None: no valid credential), what, the
        # answer; never a body or a credential (they may hold a secret), nor an anonymous caller's own text
        log.info("admin_request", request_id=request.request_id, admin=_logged(who) if who else None,
                 role=who.role if who else None, method=request.method, route=_route_name(request.method, parts),
                 name=parts[1][:128] if len(parts) > 1 and who else None, status=status)


def _route_name(method: str, parts: list[str]) -> str | None:
    """The handler's name the line gives (`list_keys`, ...), or None for no such route or method."""
    try:
        return _handler(method, parts)[1].__name__
    except GatewayError:
        return None


def _audited(who: AdminPrincipal) -> str:
    """The admin as the audit log and `/me` name it: a key's name, or `jwt:` and a token's subject. No
    admin key's name starts with `jwt:` (config/control.py, `admin_fields.NAME`), so a subject chosen at
    the IdP can never pass for a key in the audit (docs/identity.md, Admin roles)."""
    return IDP_PREFIX + who.name if who.via == "jwt" else who.name


def _logged(who: AdminPrincipal) -> str:
    """The admin as the log line names it: a key's name, or a token's subject hashed (never raw)."""
    return f"jwt:{subject_hash(who.name)}" if who.via == "jwt" else who.name


class Forbidden(GatewayError):
    status, type, code, outcome = 403, "permission_error", "permission_denied", "auth_error"


_STATUS: dict[type[Exception], int] = {Conflict: 409, Missing: 404, Invalid: 400, StoreRefused: 400,
                                        StoreUnavailable: 503, Unparsable: 500}


def _error(control: ControlPlane, exc: Exception) -> GatewayError:
    if isinstance(exc, Conflict):
        return NameTaken(str(exc))
    if isinstance(exc, Missing):
        return NotFound(str(exc))
    if isinstance(exc, Invalid):
        return InvalidRequest(str(exc), param=exc.param)
    if isinstance(exc, Unparsable):
        return RowUnreadable(str(exc))
    if isinstance(exc, StoreRefused):  # nothing was stored, and the store is up: not counted as its error
        return ValueRefused(f"{exc}: nothing was stored")
    return store_down(control, exc)


def _handler(method: str, parts: list[str]) -> tuple[str, Handler]:
    route = {1: parts[0], 2: parts[0] + "/{name}", 3: parts[0] + "/{name}/" + parts[-1]}.get(len(parts), "")
    methods = _ROUTES.get(route)
    if methods is None or (len(parts) > 1 and not parts[1]):
        raise NotFound("no such admin route")
    if len(parts) > 1 and "\x00" in parts[1]:  # no name holds a NUL (PostgreSQL's text cannot): none exists
        raise NotFound(f"no {parts[0].rstrip('s')} named {parts[1][:64]!r}")
    handler = methods.get(method)
    if handler is None:
        raise MethodNotAllowed("method not allowed on this route", headers={"Allow": ", ".join(methods)})
    return route, handler


# -- keys -----------------------------------------------------------------------------------------

def key_view(k: StoredKey) -> dict[str, Any]:
    return {"object": "gateway.key", "name": k.name, "team": k.team, **_limits_view(k.limits),
            "expires_at": f.iso(k.expires_at), "metadata": orjson.loads(k.metadata), "created_at": f.iso(k.created_at),
            "id": k.id}


def _limits_view(lim: Limits) -> dict[str, Any]:
    return {"models": None if lim.models is None else list(lim.models), "rpm": lim.rpm, "tpm": lim.tpm,
            "budget_usd": lim.budget_usd, "budget_period": lim.budget_period}


def _new_secret() -> tuple[str, str]:
    secret = "sk-gw-" + secrets.token_urlsafe(32)
    return secret, hashlib.sha256(secret.encode()).hexdigest()


async def create_key(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    config: Config = request.app.runtime.config
    data = f.json_object(request.body, f.KEY_FIELDS)
    name = f.name_of(data)
    if any(k.name == name for k in config.auth.keys):
        raise NameTaken(f"a key named {name} exists (in the config file)")
    lim = f.limits(data, Limits(), frozenset(config.models))
    await s.within_team(cp, actor, lim)
    key = StoredKey(name=name, limits=lim,
                    team=s.key_team(actor, f.team_of(data, None)), expires_at=f.expires_at(data, None, actor.now),
                    metadata=f.metadata(data, "{}"), created_at=actor.now, id="k-" + secrets.token_hex(12))
    secret, digest = _new_secret()
    await cp.store.create_key(actor, key, digest)
    await cp.changed()
    return json_response({**key_view(key), "key": secret}, status=201)


async def list_keys(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    keys, more = await cp.store.list_keys(f.page(f.query(request)), team=s.scope(actor))
    return json_response({"object": "list", "data": [key_view(k) for k in keys], "has_more": more})


async def read_key(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    return json_response(key_view(await s.team_key(cp, actor, parts[1])))


async def patch_key(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    data = f.json_object(request.body, tuple(x for x in f.KEY_FIELDS if x != "name"))
    old = await s.team_key(cp, actor, parts[1])
    models = frozenset(request.app.runtime.config.models)
    lim = f.limits(data, old.limits, models)
    await s.within_team(cp, actor, lim, data.keys())
    new = replace(old, limits=lim, team=s.key_team(actor, f.team_of(data, old.team)),
                  expires_at=f.expires_at(data, old.expires_at, actor.now), metadata=f.metadata(data, old.metadata))
    await cp.store.update_key(actor, new, data)
    await cp.changed()
    return json_response(key_view(new))


async def delete_key(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    await s.may_touch_key(cp, actor, parts[1])
    await cp.store.delete_key(actor, parts[1])
    await cp.changed()
    return json_response({"object": "gateway.key.deleted", "name": parts[1], "deleted": True})


async def rotate_key(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    grace_s = f.grace(f.json_object(request.body, ("grace_s",)))
    await s.may_touch_key(cp, actor, parts[1])
    secret, digest = _new_secret()
    await cp.store.rotate_key(actor, parts[1], digest, grace_s)
    await cp.changed()
    key = await cp.store.get_key(parts[1])
    return json_response({**key_view(key), "key": secret, "previous_key_expires_at": f.iso(actor.now + grace_s)})


# -- teams ----------------------------------------------------------------------------------------

def team_view(t: Team) -> dict[str, Any]:
    return {"object": "gateway.team", "name": t.name, **_limits_view(t.limits), "created_at": f.iso(t.created_at),
            "id": t.id}


async def create_team(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    data = f.json_object(request.body, f.TEAM_FIELDS)
    team = Team(name=f.name_of(data), limits=f.limits(data, Limits(), frozenset(request.app.runtime.config.models)),
                created_at=actor.now, id="t-" + secrets.token_hex(12))
    await cp.store.create_team(actor, team)
    await cp.changed()
    return json_response(team_view(team), status=201)


async def list_teams(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    page = f.page(f.query(request))
    own = s.scope(actor)
    if own is not None:  # a team admin's list is its own team
        teams, more = ([await cp.store.get_team(own)] if page.after is None or own > page.after else []), False
    else:
        teams, more = await cp.store.list_teams(page)
    return json_response({"object": "list", "data": [team_view(t) for t in teams], "has_more": more})


async def read_team(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    s.visible(actor, parts[1], "team", parts[1])
    return json_response(team_view(await cp.store.get_team(parts[1])))


async def patch_team(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    data = f.json_object(request.body, f.LIMIT_FIELDS)
    old = await cp.store.get_team(parts[1])
    new = replace(old, limits=f.limits(data, old.limits, frozenset(request.app.runtime.config.models)))
    await cp.store.update_team(actor, new, data)
    await cp.changed()
    return json_response(team_view(new))


async def delete_team(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    await cp.store.delete_team(actor, parts[1])
    await cp.changed()
    return json_response({"object": "gateway.team.deleted", "name": parts[1], "deleted": True})


# -- spend and audit ------------------------------------------------------------------------------

async def spend(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    q = f.spend_query(f.query(request))
    if (own := s.scope(actor)) is not None:
        q = replace(q, team=own)
    await cp.ledger.settle()  # this process's journaled rows are in, not just those of the last commit
    rows = await cp.store.spend(q)
    data = [{**dict(r.group), "requests": r.requests, "input_tokens": r.input_tokens,
             "output_tokens": r.output_tokens, "cached_input_tokens": r.cached_input_tokens,
             "reasoning_tokens": r.reasoning_tokens, "cost_usd": round(r.cost_usd, 8)} for r in rows]
    return json_response({"object": "list", "group_by": list(q.group_by), "from": q.day_from, "to": q.day_to,
                          "data": data})


async def audit(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    entries, more = await cp.store.audit(f.page(f.query(request), numeric=True), team=s.scope(actor))
    data = [{"id": e.id, "at": f.iso(e.ts), "admin": e.admin, "action": e.action, "name": e.target,
             "detail": orjson.loads(e.detail)} for e in entries]
    return json_response({"object": "list", "data": data, "has_more": more})


_ROUTES: dict[str, dict[str, Handler]] = {
    "keys": {"POST": create_key, "GET": list_keys},
    "keys/{name}": {"GET": read_key, "PATCH": patch_key, "DELETE": delete_key},
    "keys/{name}/rotate": {"POST": rotate_key},
    "teams": {"POST": create_team, "GET": list_teams},
    "teams/{name}": {"GET": read_team, "PATCH": patch_team, "DELETE": delete_team},
    "spend": {"GET": spend},
    "audit": {"GET": audit},
    "stats": {"GET": admin_stats.stats},
    "me": {"GET": s.me},
    "admin-keys": {"POST": s.create_admin_key, "GET": s.list_admin_keys},
    "admin-keys/{name}": {"DELETE": s.delete_admin_key},
}
