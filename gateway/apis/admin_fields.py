"""The control plane's request bodies -> typed values: every bad field is a 400 naming it.

Each value is checked against what every later read can hold (`store/rows.py`), so a value that is
stored can always be listed and shown (docs/keys-teams-spend.md, "Validation").
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeGuard
from urllib.parse import parse_qsl

import orjson

from gateway.errors import InvalidRequest
from gateway.store.rows import MAX_INT
from gateway.store.types import GROUPS, Limits, Page, SpendQuery

LIMIT_FIELDS = ("models", "rpm", "tpm", "budget_usd", "budget_period")
KEY_FIELDS = ("name", "team", "expires_at", "metadata", *LIMIT_FIELDS)
TEAM_FIELDS = ("name", *LIMIT_FIELDS)
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")  # whole string (fullmatch): "alice\n" is not "alice"
# a URL's dot segments: a browser (or any WHATWG URL client) sends `/admin/v1/keys/..` as `/admin/v1/`, so
# an object so named could not be changed or revoked from the console (docs/keys-teams-spend.md, Validation)
DOT_SEGMENTS = (".", "..")
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # ASCII digits, two each for month and day
MAX_METADATA = 4096
MAX_MODELS = 1000
MAX_DEPTH = 32  # metadata: well within what the JSON encoder writes back (a list answer nests it deeper)
MAX_FUTURE_S = 100 * 365.25 * 86400  # expires_at: within 100 years
MAX_PAGE, DEFAULT_PAGE = 1000, 100


def json_object(body: bytes, allowed: tuple[str, ...]) -> dict[str, Any]:
    try:
        data = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        raise InvalidRequest("the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    for field in data:
        if field not in allowed:
            raise InvalidRequest(f"unknown field {str(field)[:64]!r}", param=str(field)[:64])
    return data


def name_of(data: dict[str, Any]) -> str:
    name = data.get("name")
    if not is_name(name):
        raise InvalidRequest("name is required: 1 to 64 of letters, digits, _ . -, not . or ..", param="name")
    return name


def is_name(v: object) -> TypeGuard[str]:
    return isinstance(v, str) and NAME.fullmatch(v) is not None and v not in DOT_SEGMENTS


def _count(data: dict[str, Any], field: str) -> int | None:
    v = data[field]
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_INT:  # 0: refuse every request
        raise InvalidRequest(f"{field} must be an integer from 0 to 2^53, or null", param=field)
    return v


def limits(data: dict[str, Any], base: Limits, models: frozenset[str]) -> Limits:
    """`base` with the limit fields present in `data` changed (null clears one)."""
    out = base
    if "models" in data:
        m = data["models"]
        if m is not None and (not isinstance(m, list) or len(m) > MAX_MODELS
                              or not all(isinstance(x, str) for x in m)):
            raise InvalidRequest("models must be a list of model names or null", param="models")
        for x in m or ():
            if x not in models:
                raise InvalidRequest(f"unknown model {x[:64]!r}", param="models")
        out = replace(out, models=None if m is None else tuple(m))
    if "rpm" in data:
        out = replace(out, rpm=_count(data, "rpm"))
    if "tpm" in data:
        out = replace(out, tpm=_count(data, "tpm"))
    if "budget_usd" in data:
        b = data["budget_usd"]
        if b is not None and (not isinstance(b, int | float) or isinstance(b, bool) or not 0 <= b <= MAX_INT):
            raise InvalidRequest("budget_usd must be a number from 0 to 2^53, or null", param="budget_usd")
        out = replace(out, budget_usd=None if b is None else float(b))
    if "budget_period" in data:
        if data["budget_period"] not in ("day", "month"):
            raise InvalidRequest("budget_period must be day or month", param="budget_period")
        out = replace(out, budget_period=data["budget_period"])
    return out


def team_of(data: dict[str, Any], default: str | None) -> str | None:
    if "team" not in data:
        return default
    t = data["team"]
    if t is not None and not is_name(t):
        raise InvalidRequest("team must be a team name or null", param="team")
    return t


def expires_at(data: dict[str, Any], default: float | None, now: float) -> float | None:
    """Epoch seconds, or an ISO 8601 time (`2026-12-31T00:00:00Z`; no offset: UTC); null: never. A
    future instant within 100 years: a past one is a mistake, a later one a unit mix-up (milliseconds)."""
    if "expires_at" not in data:
        return default
    v = data["expires_at"]
    if v is None:
        return None
    t = _instant(v)
    if t is None or not now < t <= now + MAX_FUTURE_S:
        raise InvalidRequest("expires_at must be a future time within 100 years (ISO 8601 or epoch seconds), "
                             "or null", param="expires_at")
    return t


def _instant(v: Any) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v) if abs(v) < 1e15 else None  # far beyond 100 years either way; float() of a huge int fails
    if isinstance(v, str) and len(v) <= 64:
        try:
            stamp = datetime.fromisoformat(v.replace("Z", "+00:00"))
            return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
        except (ValueError, OverflowError):
            return None
    return None


def metadata(data: dict[str, Any], default: str) -> str:
    if "metadata" not in data:
        return default
    m = data["metadata"]
    if m is None:
        return "{}"
    if not isinstance(m, dict) or _depth(m) > MAX_DEPTH:
        raise InvalidRequest(f"metadata must be a JSON object, nested {MAX_DEPTH} deep at most", param="metadata")
    text = orjson.dumps(m).decode()
    if len(text) > MAX_METADATA:
        raise InvalidRequest(f"metadata is over {MAX_METADATA} bytes", param="metadata")
    return text


def _depth(v: Any) -> int:
    """How deeply a parsed JSON value nests (a scalar: 0); stops counting past MAX_DEPTH."""
    stack, deepest = [(v, 0)], 0
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict | list) and d <= MAX_DEPTH:
            deepest = max(deepest, d + 1)
            stack.extend((child, d + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def grace(data: dict[str, Any]) -> float:
    g = data.get("grace_s", 0)
    if not isinstance(g, int | float) or isinstance(g, bool) or g < 0 or g > 30 * 86400:
        raise InvalidRequest("grace_s must be a number of seconds from 0 to 30 days", param="grace_s")
    return float(g)


def spend_query(params: dict[str, str]) -> SpendQuery:
    groups = tuple(g for g in params.get("group_by", "").split(",") if g)
    for g in groups:
        if g not in GROUPS:
            raise InvalidRequest(f"group_by takes {', '.join(GROUPS)}", param="group_by")
    if len(set(groups)) != len(groups):
        raise InvalidRequest("group_by names a field twice", param="group_by")
    days: dict[str, str] = {}
    for field in ("from", "to"):
        v = params.get(field)
        if v is not None:
            if not _DAY.fullmatch(v) or not _is_date(v):
                raise InvalidRequest(f"{field} must be a date YYYY-MM-DD", param=field)
            days[field] = v
    if "from" in days and "to" in days and days["from"] > days["to"]:
        raise InvalidRequest("from is after to", param="from")
    return SpendQuery(group_by=groups, day_from=days.get("from"), day_to=days.get("to"))


def _is_date(v: str) -> bool:
    try:
        datetime.strptime(v, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def page(params: dict[str, str], *, numeric: bool = False) -> Page:
    """`limit` (1..1000, default 100) and `after` (the last name, or with `numeric` id, seen)."""
    raw = params.get("limit", str(DEFAULT_PAGE))
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 7 and 1 <= int(raw) <= MAX_PAGE):
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_PAGE}", param="limit")
    after = params.get("after")
    if after is not None:
        # no name holds a NUL (PostgreSQL's text cannot: its driver would fail as if the store were down)
        ok = after.isascii() and after.isdigit() and len(after) <= 18 if numeric else (
            0 < len(after) <= 256 and "\x00" not in after)
        if not ok:
            raise InvalidRequest("after must be the last " + ("id" if numeric else "name") + " of the previous "
                                 "page", param="after")
    return Page(limit=int(raw), after=after)


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def query(request: Any) -> dict[str, str]:
    """A request's query parameters (the last of a repeated one), blank values kept."""
    return dict(parse_qsl(request.head.query, keep_blank_values=True))
