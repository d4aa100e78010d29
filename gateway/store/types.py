"""What crosses the store's boundary: frozen values, never driver rows or dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Period = Literal["day", "month"]
GROUPS = ("key", "team", "model", "deployment", "day", "subject")


class StoreError(Exception):
    """Base of what the store raises; the message is safe for a client (no URL, no SQL, no value)."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or failed: admin writes answer 503, the request path serves from cache."""


class StoreRefused(StoreError):
    """The database refuses the data itself (a value out of a column's range, a character it cannot
    store, a NULL where a value is required): the same row fails the same way every time, so retrying it
    cannot help. The ledger commits the rest of its batch and drops it (`ledger.py`); an admin write
    answers 400 `store_refused`."""


class Conflict(StoreError):
    """A name that is taken (409)."""


class Missing(StoreError):
    """No such key or team (404)."""


class Unparsable(StoreError):
    """A stored row that cannot be read (500 naming its column): written by hand or by an older version."""


class Invalid(StoreError):
    """A field the store refuses (400), e.g. a team that does not exist; `param` names the field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Limits:
    """A key's or a team's own limits; None: no limit of that kind."""

    models: tuple[str, ...] | None = None
    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    budget_period: Period = "day"


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    limits: Limits = Limits()
    created_at: float = 0.0
    id: str | None = None  # unique for ever (spend belongs to it); None: created before teams had ids


@dataclass(frozen=True, slots=True)
class StoredKey:
    name: str
    limits: Limits = Limits()
    team: str | None = None
    expires_at: float | None = None
    metadata: str = "{}"  # JSON object, as given
    created_at: float = 0.0
    id: str | None = None  # unique for ever: spend belongs to it, not to the name (which may be reused)


@dataclass(frozen=True, slots=True)
class Secret:
    """One valid secret of a key, as its SHA-256 hex digest; `expires_at` is set on a rotated-out one."""

    digest: str = field(repr=False)
    key_name: str
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class SkippedRow:
    """A stored row the gateway cannot read (`store/rows.py`), left out of a snapshot or a list."""

    table: str
    name: str  # its key or team name, made printable and cut short (never a secret's digest)
    column: str
    reason: str
    fingerprint: int  # changes when the row does: logged and counted once per change, not per poll


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a replica caches: read whole whenever the store's version moves."""

    version: int
    keys: tuple[StoredKey, ...] = ()
    secrets: tuple[Secret, ...] = ()
    teams: tuple[Team, ...] = ()
    skipped: tuple[SkippedRow, ...] = ()


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: `limit` at most; `has_more` when rows after the last one exist."""

    limit: int = 100
    after: str | None = None  # the last name (keys, teams) or id (audit) of the previous page


class SpendRow(NamedTuple):
    """One answered request in the ledger. `row_id` is the gateway's own unique id (idempotence);
    `request_id` is the one the client saw (x-request-id). A named tuple, not a dataclass: one is built
    per request, and its fields, in the ledger table's column order, are the row's SQL parameters as is."""

    row_id: str
    request_id: str
    ts: float
    day: str  # YYYY-MM-DD, UTC
    key: str | None
    team: str | None
    model: str
    deployment: str | None
    api: str
    outcome: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    key_id: str | None = None  # a stored key's id (its spend, whatever its name); None for a config key
    subject: str | None = None  # an IdP token's `sub` (docs/identity.md); None for a key
    team_id: str | None = None  # the team's id (its spend, whatever its name); None: a team without one


# groups one spend query may answer (docs/keys-teams-spend.md): `group_by=key,model,day,subject` over years
# would otherwise be millions of rows built, held and written at once
MAX_SPEND_GROUPS = 50_000


@dataclass(frozen=True, slots=True)
class SpendQuery:
    group_by: tuple[str, ...]  # a subset of GROUPS, in the order asked
    day_from: str | None = None  # YYYY-MM-DD inclusive
    day_to: str | None = None
    team: str | None = None  # only this team's rows (a team admin's view)
    max_groups: int = MAX_SPEND_GROUPS  # more groups than this is a 400, never an answer held whole in memory


@dataclass(frozen=True, slots=True)
class SpendTotal:
    group: tuple[tuple[str, str | None], ...]  # (group_by field, value)
    requests: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    cost_usd: float


@dataclass(frozen=True, slots=True)
class PeriodSpend:
    """The ledger's spend from a day on (inclusive), per key (`ApiKey.counter`: a stored key's id, a config
    key's name) and per team (`TeamLimits.counter`: its id, or its name): what budgets start from."""

    since: str  # YYYY-MM-DD
    keys: dict[str, float] = field(default_factory=dict)
    teams: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    ts: float
    admin: str
    action: str  # key.create, key.update, key.revoke, key.rotate, team.create, team.update, team.delete
    target: str
    detail: str = "{}"  # JSON: the fields changed (never a secret)
    id: int = 0  # ascending; a page of the audit log starts after one
    team: str | None = None  # the team of what was changed (a key's, or the team itself)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who does an admin write, for the audit log."""

    admin: str
    now: float
    role: str = "admin"  # admin, team_admin, viewer (docs/identity.md)
    team: str | None = None  # a team admin's team
