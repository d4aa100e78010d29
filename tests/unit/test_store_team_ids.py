"""Spend belongs to a team's id, not its name, on a real SQLite file and a real PostgreSQL server: a store
of the version before teams had ids migrates (a team that exists keeps no id and its budget counts on under
its name), and a team created again under a deleted one's name starts at zero."""

from __future__ import annotations

from gateway.config.types import TeamLimits
from gateway.store import Store
from gateway.store.db import Tx
from gateway.store.migrations import MIGRATIONS
from gateway.store.types import Actor, SpendQuery, SpendRow, Team


def _row(row_id: str, team: str, team_id: str | None, cost: float) -> SpendRow:
    return SpendRow(row_id, f"r-{row_id}", 1.0, "2026-12-06", "k", team, "m", "p/m", "chat", "ok",
                    cost_usd=cost, team_id=team_id)


async def _version_three(url: str) -> Store:
    """A store as the version before team ids left it (migrations 1 to 3), with a team that spent 1.0."""
    store = await Store.open(url)

    async def run(tx: Tx) -> None:
        await tx.exec("CREATE TABLE gw_schema (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
        id_col = "BIGSERIAL PRIMARY KEY" if store.dialect == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
        for version, statements in MIGRATIONS[:3]:
            for sql in statements:
                await tx.exec(sql.replace("{id}", id_col))
            await tx.exec("INSERT INTO gw_schema (version, applied_at) VALUES (?, 0)", (version,))
        await tx.exec("INSERT INTO gw_teams (name, budget_period, created_at) VALUES ('t', 'day', 1)")
        await tx.exec("INSERT INTO gw_spend (row_id, request_id, ts, day, key_name, team, model, api, outcome, "
                      "input_tokens, output_tokens, cached_input_tokens, cache_creation_input_tokens, "
                      "reasoning_tokens, cost_usd) VALUES ('old', 'old', 2, '2026-12-06', 'k', 't', 'm', 'chat', "
                      "'ok', 0, 0, 0, 0, 0, 1.0)")

    await store._db.transact(run)  # the schema as it was: no API of today's store writes it
    return store


async def test_a_store_without_team_ids_migrates_and_its_teams_count_on_by_name(store_url: str) -> None:
    store = await _version_three(store_url)
    assert await store.migrate() == [4]
    [t] = (await store.list_teams())[0]
    assert t.id is None
    assert (await store.period_spend("2026-12-06")).teams == {TeamLimits("t").counter: 1.0}
    assert TeamLimits("t").counter == "team/t"  # as before the upgrade: the budget carries on
    await store.close()


async def test_a_team_created_again_under_its_name_starts_at_zero(store_url: str) -> None:
    store = await Store.open(store_url)
    await store.migrate()
    actor = Actor("ops", 1000.0)
    await store.create_team(actor, Team("t", created_at=1000.0, id="t-old"))
    await store.record_spend([_row("1", "t", "t-old", 2.0)])
    await store.delete_team(actor, "t")
    await store.create_team(actor, Team("t", created_at=1001.0, id="t-new"))
    assert (await store.get_team("t")).id == "t-new"
    spent = (await store.period_spend("2026-12-06")).teams
    assert spent == {"team-id/t-old": 2.0}
    assert TeamLimits("t", id="t-new").counter not in spent  # the new team has spent nothing
    totals = await store.spend(SpendQuery(group_by=("team",)))
    assert [(t.group, t.cost_usd) for t in totals] == [((("team", "t"), ("team_id", "t-old")), 2.0)]
    await store.close()


async def test_a_team_views_are_those_of_the_team_that_has_the_name_now(store_url: str) -> None:
    """A team admin's spend and audit (`SpendQuery.team`, `audit(team=)`) follow the team, not its name:
    a team deleted and created again under it starts with no rows, and a team without an id (created
    before teams had ids, or only in the config) keeps the rows without one."""
    store = await Store.open(store_url)
    await store.migrate()
    await store.create_team(Actor("ops", 1000.0), Team("t", created_at=1000.0, id="t-old"))
    await store.record_spend([_row("1", "t", "t-old", 2.0), _row("legacy", "t", None, 0.5)])
    await store.update_team(Actor("ops", 1000.5), Team("t", created_at=1000.0, id="t-old"), {"rpm": 1})
    await store.delete_team(Actor("ops", 1001.0), "t")
    only_legacy = await store.spend(SpendQuery(group_by=("team",), team="t"))  # no team by the name now
    assert [(t.group, t.cost_usd) for t in only_legacy] == [((("team", "t"), ("team_id", None)), 0.5)]
    # no team has the name (as for a team only in the config): its entries are all still listed
    assert [e.action for e in (await store.audit(team="t"))[0]] == ["team.delete", "team.update", "team.create"]
    await store.create_team(Actor("ops", 1002.0), Team("t", created_at=1002.0, id="t-new"))
    assert await store.spend(SpendQuery(group_by=("team",), team="t")) == []
    await store.record_spend([_row("2", "t", "t-new", 3.0)])
    [mine] = await store.spend(SpendQuery(group_by=("team",), team="t"))
    assert (mine.group, mine.cost_usd) == ((("team", "t"), ("team_id", "t-new")), 3.0)
    assert len(await store.spend(SpendQuery(group_by=("team",)))) == 3  # an admin's view: every team's
    entries, _ = await store.audit(team="t")
    assert [(e.action, e.ts) for e in entries] == [("team.create", 1002.0)]
    assert [e.action for e in (await store.audit())[0]] == ["team.create", "team.delete", "team.update",
                                                            "team.create"]
    await store.close()
