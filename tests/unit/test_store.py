"""The store on a real SQLite file (no mocks): migrations applied once, the ledger idempotent on its row
id and committed when `record` returns, spend grouped and filtered by day, the audit log; the key cache's
team rules and expiry; the control plane's config checks."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError, parse_config
from gateway.store import KeyCache, SpendLedger, Store
from gateway.store.cache import api_key
from gateway.store.types import (
    MAX_SPEND_GROUPS,
    Actor,
    Invalid,
    Limits,
    Secret,
    Snapshot,
    SpendQuery,
    SpendRow,
    StoredKey,
    Team,
)

ACTOR = Actor(admin="ops", now=1_700_000_000.0)


def _row(row_id: str, day: str = "2026-12-01", key: str = "a", team: str | None = "t", cost: float = 1.0) -> SpendRow:
    return SpendRow(row_id=row_id, request_id=f"r-{row_id}", ts=0.0, day=day, key=key, team=team, model="m",
                    deployment="p/m", api="chat", outcome="ok", input_tokens=10, output_tokens=5, cost_usd=cost)


async def _store(tmp_path: Path) -> Store:
    store = await Store.open(f"sqlite:///{tmp_path}/s.db")
    await store.migrate()
    return store


async def test_migrations_apply_once(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite:///{tmp_path}/s.db")
    assert await store.migrate() == [1, 2, 3, 4]
    assert await store.migrate() == []
    assert await store.version() == 0
    await store.close()


async def test_ledger_rows_are_committed_when_record_returns_and_never_doubled(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    errors: list[int] = []
    ledger = SpendLedger(store, wait_s=5.0, on_error=lambda: errors.append(1))
    ledger.start()
    rows = [_row(f"x{i}") for i in range(50)]
    await asyncio.gather(*(ledger.record(r) for r in rows))
    with sqlite3.connect(tmp_path / "s.db") as other:  # another connection sees them: committed
        assert other.execute("SELECT COUNT(*) FROM gw_spend").fetchone()[0] == 50
    await store.record_spend(rows[:10])  # a batch sent again (a retry after an unclear failure)
    await ledger.record(rows[0])
    with sqlite3.connect(tmp_path / "s.db") as other:
        assert other.execute("SELECT COUNT(*) FROM gw_spend").fetchone()[0] == 50
    await ledger.close()
    await store.close()
    assert errors == []


async def test_spend_groups_and_days(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    await store.record_spend([_row("1"), _row("2", key="b"), _row("3", day="2026-12-02", team=None, cost=2.5)])
    totals = await store.spend(SpendQuery(group_by=("team",)))
    assert [(t.group, t.requests, t.cost_usd) for t in totals] == [
        ((("team", None), ("team_id", None)), 1, 2.5), ((("team", "t"), ("team_id", None)), 2, 2.0)]
    one_day = await store.spend(SpendQuery(group_by=("key", "day"), day_from="2026-12-02", day_to="2026-12-02"))
    assert [(t.group, t.input_tokens, t.output_tokens) for t in one_day] == [
        ((("key", "a"), ("key_id", None), ("day", "2026-12-02")), 10, 5)]
    everything = await store.spend(SpendQuery(group_by=()))
    assert [(t.group, t.requests) for t in everything] == [((), 3)]
    await store.close()


async def test_a_spend_query_over_its_groups_is_refused_not_answered_whole(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    await store.record_spend([_row(str(i), key=f"k{i}") for i in range(6)])
    assert len(await store.spend(SpendQuery(group_by=("key",), max_groups=6))) == 6
    with pytest.raises(Invalid) as refused:
        await store.spend(SpendQuery(group_by=("key",), max_groups=5))
    assert refused.value.param == "group_by" and "more than 5 groups" in str(refused.value)
    assert [t.requests for t in await store.spend(SpendQuery(group_by=(), max_groups=1))] == [6]
    assert SpendQuery(group_by=()).max_groups == MAX_SPEND_GROUPS
    await store.close()


async def test_writes_are_audited_and_move_the_version(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    await store.create_team(ACTOR, Team("t", Limits(rpm=5), 1.0))
    await store.create_key(ACTOR, StoredKey("k", Limits(models=("m",)), team="t", created_at=1.0), "ab" * 32)
    await store.rotate_key(ACTOR, "k", "cd" * 32, grace_s=30)
    snap = await store.snapshot()
    assert snap.version == 3
    assert sorted((s.digest[:2], s.expires_at) for s in snap.secrets) == [("ab", ACTOR.now + 30), ("cd", None)]
    assert [(a.action, a.target, a.admin) for a in (await store.audit())[0]] == [
        ("key.rotate", "k", "ops"), ("key.create", "k", "ops"), ("team.create", "t", "ops")]
    await store.close()


def test_a_team_key_gets_both_model_lists_and_the_team_limits() -> None:
    team = Team("t", Limits(models=("a", "b"), rpm=3, budget_usd=9.0, budget_period="month"))
    key = api_key(StoredKey("k", Limits(models=("b", "c"), rpm=100)), team)
    assert key.models == ("b",) and key.rpm == 100
    assert key.team is not None and (key.team.rpm, key.team.budget_usd, key.team.counter) == (3, 9.0, "team/t")
    assert api_key(StoredKey("k"), team).models == ("a", "b")
    assert api_key(StoredKey("k"), None).models is None


def test_the_cache_refuses_expired_keys_and_secrets() -> None:
    now = [100.0]
    cache = KeyCache(clock=lambda: now[0])
    cache.load(Snapshot(version=1, keys=(StoredKey("k", expires_at=200.0), StoredKey("r")),
                        secrets=(Secret("aa" * 32, "k"), Secret("bb" * 32, "r", expires_at=150.0),
                                 Secret("cc" * 32, "r"))))
    assert cache.find(bytes.fromhex("aa" * 32)) is not None
    assert cache.find(bytes.fromhex("bb" * 32)) is not None  # a rotated-out secret within its grace
    now[0] = 150.0
    assert cache.find(bytes.fromhex("bb" * 32)) is None and cache.find(bytes.fromhex("cc" * 32)) is not None
    now[0] = 200.0
    assert cache.find(bytes.fromhex("aa" * 32)) is None
    assert cache.find(bytes.fromhex("dd" * 32)) is None


def _config(**extra: Any) -> dict[str, Any]:
    return {"auth": {"keys": [{"name": "g", "key": "same-secret"}]},
            "providers": {"p": {"type": "mock"}},
            "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}]}], **extra}


def test_an_admin_key_that_is_also_a_gateway_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_config(admin={"keys": [{"name": "a", "key": "same-secret"}]},
                             store={"url": "sqlite:///tmp/x.db"}), env={})
    assert err.value.errors == ["admin.keys[0]: this admin key is also a gateway key (auth.keys): use different "
                                "secrets"]
    assert "same-secret" not in str(err.value)


def test_store_config_errors_name_their_keys() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_config(admin={"keys": [{"name": "a", "key": "other"}]}), env={})
    assert err.value.errors == ["store.url: required with admin.keys or admin.jwt_groups: the control plane keeps "
                                "keys in the store"]
    with pytest.raises(ConfigError) as err:
        parse_config(_config(store={"url": "mysql://x"}), env={})
    assert err.value.errors[0].startswith("store.url: must be sqlite:///")
    raw = _config(store={"url": "sqlite:///tmp/x.db"})
    raw["auth"] = {}
    assert parse_config(raw, env={}).store.url == "sqlite:///tmp/x.db"  # keys may all live in the store
