"""Budgets from the ledger, on a real SQLite store (no mocks): the period's spend per key and per team,
one process's own rows left out; a memory backend counts its own spend plus every other process's from
the ledger, never one twice; `Retry-After` of a used-up budget is the time to the period's end."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gateway.pipeline.budget_sync import BudgetSync, period_start
from gateway.pipeline.ids import SPEND_ROW_IDS
from gateway.state.base import seconds_until_reset
from gateway.state.memory import MemoryBackend
from gateway.store import Store
from gateway.store.types import SpendRow


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def _row(row_id: str, day: str, key: str, team: str | None, cost: float) -> SpendRow:
    return SpendRow(row_id=row_id, request_id=row_id, ts=0.0, day=day, key=key, team=team, model="m",
                    deployment="p/m", api="chat", outcome="ok", cost_usd=cost)


def test_retry_after_a_used_up_budget_is_the_time_to_the_periods_end() -> None:
    assert seconds_until_reset("day", _at("2026-12-06T23:59:30")) == 30
    assert seconds_until_reset("day", _at("2026-12-06T00:00:00")) == 86_400
    assert seconds_until_reset("month", _at("2026-12-31T23:59:59.5")) == 1  # at least 1, never 0
    assert seconds_until_reset("month", _at("2027-02-27T00:00:00")) == 2 * 86_400
    assert period_start("month", _at("2026-12-06T12:00:00")) == "2026-12-01"
    assert period_start("day", _at("2026-12-06T12:00:00")) == "2026-12-06"


async def test_the_ledger_spend_of_a_period_by_key_and_team_without_one_process_own_rows(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite:///{tmp_path}/s.db")
    await store.migrate()
    await store.record_spend([
        _row("aaaa01", "2026-11-30", "k", "t", 100.0),  # last month: not in December's figures
        _row("aaaa02", "2026-12-01", "k", "t", 1.0),
        _row("aaaa03", "2026-12-06", "k", None, 2.0),  # the key before it joined the team
        _row("bbbb01", "2026-12-06", "j", "t", 4.0),
    ])
    month = await store.period_spend("2026-12-01")
    assert (month.keys, month.teams) == ({"k": 3.0, "j": 4.0}, {"team/t": 5.0})  # by `TeamLimits.counter`
    day = await store.period_spend("2026-12-06", exclude_row_prefix="bbbb")
    assert (day.keys, day.teams) == ({"k": 2.0}, {})
    await store.close()


async def test_memory_state_counts_its_own_spend_and_the_others_from_the_ledger_once(tmp_path: Path) -> None:
    now = _at("2026-12-06T12:00:00")
    store = await Store.open(f"sqlite:///{tmp_path}/s.db")
    await store.migrate()
    await store.record_spend([_row("0" * 16 + "01", "2026-12-06", "k", "t", 1.0)])  # a process before us
    state = MemoryBackend()
    sync = BudgetSync(store, state, refresh_s=60.0, timeout_s=5.0, clock=lambda: now)
    assert not await state.spend_seeded("day", now)
    assert await sync.load()  # what the process does before it serves
    assert await state.spend("k", "day", now) == 1.0 and await state.spend("team/t", "day", now) == 1.0
    assert await state.spend("k", "month", now) == 1.0
    await state.add_spend("k", "day", 0.5, now)  # this process's own request (as `limits.settle`)...
    await state.add_spend("team/t", "day", 0.5, now)
    await store.record_spend([_row(SPEND_ROW_IDS.new(), "2026-12-06", "k", "t", 0.5)])  # ... and its row
    await store.record_spend([_row("f" * 16 + "01", "2026-12-06", "k", "t", 2.0)])  # another process's
    assert await sync.load()  # a later look
    assert await state.spend("k", "day", now) == 3.5  # 1 + 2 from the others, 0.5 of its own: once
    assert await state.spend("team/t", "day", now) == 3.5
    assert await state.spend("k", "day", now + 86_400) == 0.0  # the next day starts from nothing
    await store.close()
