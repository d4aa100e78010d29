"""A team deleted and created again under its name starts with no spend (docs/keys-teams-spend.md, "Spend
belongs to a key's or a team's id"), on a real SQLite file and a real PostgreSQL server, with a real
gateway process and memory state or a real redis-server: its budget is not used up by the deleted team's
rows, neither in the counters nor after a restart (budgets start from the ledger), and spend by team
still reports the deleted team's rows, under its own id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane import GatewayProcess, admin_call, raw_config
from tests.integration.test_budget_restarts import _chat, _cost_of_one, _new_key, _spend_until_refused
from tests.redis_server import RedisServer


def _create_team(port: int, budget_usd: float) -> str | None:
    status, body = admin_call(port, "POST", "teams", {"name": "t", "budget_usd": budget_usd})
    assert status == 201, body
    return body.get("id")  # type: ignore[no-any-return]  # a str (None before teams had ids)


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """`state`: each process's own counters, or counters shared in a real redis-server."""
    if request.param == "memory":
        yield {"backend": "memory"}
        return
    with RedisServer() as redis:
        yield {"backend": "redis", "redis_url": redis.url}


def test_a_team_created_again_under_a_deleted_ones_name_starts_at_zero(tmp_path: Path, store_url: str,
                                                                      state: dict[str, str]) -> None:
    gw = GatewayProcess(tmp_path, {**raw_config(store_url), "state": state})
    gw.start()
    try:
        cost = _cost_of_one(gw.port)
        old_id = _create_team(gw.port, 1.5 * cost)
        old_key = _new_key(gw.port, "a", team="t")
        assert _spend_until_refused(gw.port, old_key) == 2  # the old team's budget is used up
        assert admin_call(gw.port, "DELETE", "keys/a")[0] == 200
        assert admin_call(gw.port, "DELETE", "teams/t")[0] == 200
        new_id = _create_team(gw.port, 1.5 * cost)
        new_key = _new_key(gw.port, "b", team="t")
        assert _chat(gw.port, new_key)[0] == 200  # under the new team's budget: served
        assert new_id is not None and old_id is not None and new_id != old_id

        gw.stop()
        gw.start()  # budgets start from the ledger: the old team's rows are not the new one's
        assert _chat(gw.port, new_key)[0] == 200  # 2 of 1.5 requests' cost: one more is admitted, then...
        assert _chat(gw.port, new_key)[0] == 429  # ... the new team's own budget is used up

        status, spend = admin_call(gw.port, "GET", "spend?group_by=team")
        assert status == 200
        by_id = {r["team_id"]: r["cost_usd"] for r in spend["data"] if r["team"] == "t"}
        # the deleted team's rows stay reported, as its own (a refused request's row costs nothing)
        assert by_id == {old_id: pytest.approx(2 * cost), new_id: pytest.approx(2 * cost)}
    finally:
        gw.stop()
