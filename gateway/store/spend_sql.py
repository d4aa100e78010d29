"""The spend query's SQL (`GET /admin/v1/spend`, docs/keys-teams-spend.md, "Spend") and its rows read back:
one statement for SQLite and PostgreSQL, its column names from a fixed table, never from the request."""

from __future__ import annotations

from typing import Any

from gateway.store.types import Invalid, SpendQuery, SpendTotal

# `key`, `team` grouped by their ids too: a reused name's spend stays apart (docs/keys-teams-spend.md, "Spend")
_GROUP_COL = {"key": "key_name", **{g: g for g in ("key_id", "team", "team_id", "model", "deployment", "day",
                                                  "subject")}}
_WITH_ID = {"key": "key_id", "team": "team_id"}
# a team's rows are those of its id; a team without one (created before teams had ids, or only in the
# config: no row in gw_teams) has the rows without one. Portable: no `IS NOT DISTINCT FROM` in older SQLite.
_TEAM_NOW = ("team = ? AND (team_id = (SELECT id FROM gw_teams WHERE name = ?) "
             "OR (team_id IS NULL AND (SELECT id FROM gw_teams WHERE name = ?) IS NULL))")


def spend_sql(q: SpendQuery) -> tuple[tuple[str, ...], str, list[Any]]:
    """The groups the rows carry, the statement and its parameters. It reads one row past `max_groups`, so
    that `spend_totals` can tell an answer that would be over it."""
    groups = tuple(g for field in q.group_by for g in ((field, _WITH_ID[field]) if field in _WITH_ID else (field,)))
    cols = [_GROUP_COL[g] for g in groups]
    where, params = [], []
    if q.day_from:
        where.append("day >= ?")
        params.append(q.day_from)
    if q.day_to:
        where.append("day <= ?")
        params.append(q.day_to)
    if q.team is not None:  # the team that has the name now: a deleted namesake's rows are not its own
        where.append(_TEAM_NOW)
        params.extend((q.team,) * 3)
    sql = ("SELECT " + "".join(c + ", " for c in cols) + "COUNT(*), SUM(input_tokens), SUM(output_tokens), "
           "SUM(cached_input_tokens), SUM(reasoning_tokens), SUM(cost_usd) FROM gw_spend"
           + (" WHERE " + " AND ".join(where) if where else "")
           + (" GROUP BY " + ", ".join(cols) + " ORDER BY " + ", ".join(cols) if cols else "")
           + f" LIMIT {q.max_groups + 1:d}")  # an int of ours, never the request's
    return groups, sql, params


def spend_totals(q: SpendQuery, groups: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[SpendTotal]:
    if len(rows) > q.max_groups:
        raise Invalid(f"more than {q.max_groups} groups: narrow from and to, or group_by less", param="group_by")
    return [_total(groups, r) for r in rows]


def _total(groups: tuple[str, ...], r: tuple[Any, ...]) -> SpendTotal:
    n = len(groups)
    return SpendTotal(group=tuple(zip(groups, r[:n], strict=True)), requests=int(r[n]),
                      input_tokens=int(r[n + 1] or 0), output_tokens=int(r[n + 2] or 0),
                      cached_input_tokens=int(r[n + 3] or 0), reasoning_tokens=int(r[n + 4] or 0),
                      cost_usd=float(r[n + 5] or 0.0))
