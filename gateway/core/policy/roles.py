"""Admin roles on the control plane (docs/identity.md, "Admin roles"): who may call which `/admin/v1`
route, and how a team admin's view is narrowed to its own team. Pure: the API layer asks, then acts.

- `admin` does everything.
- `team_admin` manages its own team's keys (create, read, change, rotate, revoke, limits up to the team's
  own), reads that team (never changes it), its spend and its audit. Another team's objects answer 404,
  as if they did not exist.
- `viewer` reads spend and stats.
Every role reads `/admin/v1/me`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Role = Literal["admin", "team_admin", "viewer"]
STRENGTH: dict[str, int] = {"admin": 3, "team_admin": 2, "viewer": 1}


@dataclass(frozen=True, slots=True)
class AdminPrincipal:
    """Who is calling the control plane: the audit log's `admin` is `name` (a key's name, or a token's
    subject)."""

    name: str
    role: Role
    team: str | None = None  # a team admin's team
    via: Literal["config_key", "stored_key", "jwt"] = "config_key"


# route (as the admin API's router names it) -> method -> the roles allowed; absent: admin only
_TEAM_KEYS = frozenset({"admin", "team_admin"})
_READERS = frozenset({"admin", "team_admin", "viewer"})
_ALLOWED: dict[str, dict[str, frozenset[str]]] = {
    "keys": {"GET": _TEAM_KEYS, "POST": _TEAM_KEYS},
    "keys/{name}": {"GET": _TEAM_KEYS, "PATCH": _TEAM_KEYS, "DELETE": _TEAM_KEYS},
    "keys/{name}/rotate": {"POST": _TEAM_KEYS},
    "teams": {"GET": _TEAM_KEYS},
    "teams/{name}": {"GET": _TEAM_KEYS},
    "spend": {"GET": _READERS},
    "stats": {"GET": _READERS},
    "audit": {"GET": _TEAM_KEYS},
    "me": {"GET": _READERS},
}


def may(principal: AdminPrincipal, route: str, method: str) -> bool:
    if principal.role == "admin":
        return True
    return principal.role in _ALLOWED.get(route, {}).get(method, frozenset())


def sees_team(principal: AdminPrincipal, team: str | None) -> bool:
    """Whether an object of `team` exists for this caller (a team admin sees its own team's only)."""
    return principal.role != "team_admin" or (team is not None and team == principal.team)


def team_scope(principal: AdminPrincipal) -> str | None:
    """The team every list and total is narrowed to (None: no narrowing)."""
    return principal.team if principal.role == "team_admin" else None


def strongest(roles: Iterable[tuple[Role, str | None]]) -> tuple[Role, str | None] | None:
    """The strongest of several (role, team) grants (a token in several `admin.jwt_groups`); between two
    team admin grants, the first in config order."""
    best: tuple[Role, str | None] | None = None
    for role, team in roles:
        if best is None or STRENGTH[role] > STRENGTH[best[0]]:
            best = (role, team)
    return best


def over_team_limit(value: float | None, team_limit: float | None) -> bool:
    """A team admin's key may not exceed its team's own limit; no team limit: anything goes. A key
    without the limit (None) under a team that has one is not over: the team's limit still applies."""
    return team_limit is not None and value is not None and value > team_limit
