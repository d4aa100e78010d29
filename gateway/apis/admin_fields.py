"""The control plane's request bodies -> typed values (CONTRACT §11): every bad field is a 400 naming it."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.config.safety_config import NAME
from gateway.errors import InvalidRequest
from gateway.store.types import GROUPS, Limits, SpendQuery

LIMIT_FIELDS = ("models", "rpm", "tpm", "budget_usd", "budget_period")
KEY_FIELDS = ("name", "team", "expires_at", "metadata", *LIMIT_FIELDS)
TEAM_FIELDS = ("name", *LIMIT_FIELDS)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_METADATA = 4096


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
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidRequest("name is required: letters, digits, _ . : - (max 63)", param="name")
    return name


def _count(data: dict[str, Any], field: str) -> int | None:
    v = data[field]
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise InvalidRequest(f"{field} must be a positive integer or null", param=field)
    return v


def limits(data: dict[str, Any], base: Limits, models: frozenset[str]) -> Limits:
    """`base` with the limit fields present in `data` changed (null clears one)."""
    out = base
    if "models" in data:
        m = data["models"]
        if m is not None and (not isinstance(m, list) or not all(isinstance(x, str) for x in m)):
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
        if b is not None and (not isinstance(b, int | float) or isinstance(b, bool) or b < 0):
            raise InvalidRequest("budget_usd must be a number >= 0 or null", param="budget_usd")
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
    if t is not None and (not isinstance(t, str) or not NAME.match(t)):
        raise InvalidRequest("team must be a team name or null", param="team")
    return t


def expires_at(data: dict[str, Any], default: float | None) -> float | None:
    """Epoch seconds, or an ISO 8601 time (`2026-12-31T00:00:00Z`); null: never."""
    if "expires_at" not in data:
        return default
    v = data["expires_at"]
    if v is None:
        return None
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        try:
            stamp = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    raise InvalidRequest("expires_at must be an ISO 8601 time, epoch seconds or null", param="expires_at")


def metadata(data: dict[str, Any], default: str) -> str:
    if "metadata" not in data:
        return default
    m = data["metadata"]
    if m is None:
        return "{}"
    if not isinstance(m, dict):
        raise InvalidRequest("metadata must be a JSON object", param="metadata")
    text = orjson.dumps(m).decode()
    if len(text) > MAX_METADATA:
        raise InvalidRequest(f"metadata is over {MAX_METADATA} bytes", param="metadata")
    return text


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
    days = {}
    for field in ("from", "to"):
        v = params.get(field)
        if v is not None:
            try:
                datetime.strptime(v, "%Y-%m-%d")
            except ValueError:
                raise InvalidRequest(f"{field} must be a date YYYY-MM-DD", param=field) from None
            days[field] = v if _DAY.match(v) else None
    return SpendQuery(group_by=groups, day_from=days.get("from"), day_to=days.get("to"))


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
