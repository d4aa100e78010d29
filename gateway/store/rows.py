"""Stored rows -> typed values, strictly: a row the gateway cannot read raises `Unreadable` naming its
column, never a driver's or the parser's own exception, so one bad row (written by hand, or by an older
version) is skipped by the sync and the lists instead of ending them (docs/keys-teams-spend.md, "Rows
the gateway cannot read").

What "readable" means is what admin writes accept (`apis/admin_fields.py`), widened only where an older
row may hold more: any non-empty name, integers in 0..2^53, instants that a date can show.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from gateway.store.types import Limits, Period, Secret, StoredKey, Team

MAX_INT = 2**53  # JSON's exact integers: what every reader (and the API's clients) can hold
MIN_TIME, MAX_TIME = -62_135_596_800.0, 253_402_300_799.0  # 0001-01-01 .. 9999-12-31T23:59:59 UTC
_HEX64 = re.compile(r"[0-9a-f]{64}")


class Unreadable(ValueError):
    """A stored row that cannot be read; `column` names the culprit (its value is never repeated)."""

    def __init__(self, column: str, reason: str):
        super().__init__(f"{column}: {reason}")
        self.column, self.reason = column, reason


def text(column: str, v: Any, *, optional: bool = False) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v:
        raise Unreadable(column, "not a non-empty string")
    return v


def count(column: str, v: Any) -> int | None:
    """An integer column: SQLite keeps whatever it was given (a float, a text), PostgreSQL up to 2^63."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise Unreadable(column, "not an integer")
    if not 0 <= v <= MAX_INT:
        raise Unreadable(column, "out of range 0..2^53")
    return v


def number(column: str, v: Any, low: float, high: float, *, optional: bool = True) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise Unreadable(column, "not a number")
    f = float(v)
    if not math.isfinite(f) or not low <= f <= high:
        raise Unreadable(column, "out of range")
    return f


def instant(column: str, v: Any, *, optional: bool = True) -> float | None:
    return number(column, v, MIN_TIME, MAX_TIME, optional=optional)


def models(v: Any) -> tuple[str, ...] | None:
    if v is None:
        return None
    try:
        parsed = orjson.loads(v) if isinstance(v, str | bytes) else None
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(m, str) for m in parsed):
        raise Unreadable("models", "not a JSON list of names")
    return tuple(parsed)


def period(v: Any) -> Period:
    if v == "day":
        return "day"
    if v == "month":
        return "month"
    raise Unreadable("budget_period", "neither day nor month")


def metadata(v: Any) -> str:
    try:
        parsed = orjson.loads(v) if isinstance(v, str) else None
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise Unreadable("metadata", "not a JSON object")
    return str(v)


def limits(m: Any, rpm: Any, tpm: Any, budget: Any, per: Any) -> Limits:
    return Limits(models=models(m), rpm=count("rpm", rpm), tpm=count("tpm", tpm),
                  budget_usd=number("budget_usd", budget, 0.0, float(MAX_INT)), budget_period=period(per))


def key(r: tuple[Any, ...]) -> StoredKey:
    """A gw_keys row, in `store._KEY_COLS` order."""
    return StoredKey(name=text("name", r[0]) or "", team=text("team", r[1], optional=True),
                     limits=limits(r[2], r[3], r[4], r[5], r[6]), expires_at=instant("expires_at", r[7]),
                     metadata=metadata(r[8]), created_at=instant("created_at", r[9], optional=False) or 0.0,
                     id=text("id", r[10], optional=True))


def team(r: tuple[Any, ...]) -> Team:
    """A gw_teams row, in `store._TEAM_COLS` order."""
    return Team(name=text("name", r[0]) or "", limits=limits(r[1], r[2], r[3], r[4], r[5]),
                created_at=instant("created_at", r[6], optional=False) or 0.0, id=text("id", r[7], optional=True))


def secret(r: tuple[Any, ...]) -> Secret:
    """A gw_key_secrets row: digest, key_name, expires_at."""
    digest = r[0]
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise Unreadable("digest", "not a SHA-256 in hex")
    return Secret(digest, text("key_name", r[1]) or "", instant("expires_at", r[2]))
