"""Budgets across restarts and replicas (issue #56), with real processes: a gateway on SQLite with memory
state restarted again and again, two replicas on PostgreSQL with a real redis-server (restarted, and Redis
emptied under them), and `--workers 2` on SQLite and PostgreSQL. However often they restart, the period's
spend in the ledger never passes a budget by more than one request's cost per process; `GET
/v1/gateway/spend` answers the ledger's figure; a budget refusal tells the SDKs not to retry."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.state.base import seconds_until_reset
from tests.control_plane import GatewayProcess, admin_call, raw_config, two_replicas
from tests.postgres_server import PostgresServer
from tests.redis_server import RedisServer

PROMPT = [{"role": "user", "content": "hi"}]


def _chat(port: int, key: str) -> tuple[int, dict[str, str]]:
    """One request on a connection of its own (so `--workers` spreads them): status and headers."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
                                 data=json.dumps({"model": "m", "messages": PROMPT}).encode(),
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, dict(exc.headers)


def _spend(port: int, key: str) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/gateway/spend",
                                 headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body: dict[str, Any] = json.loads(resp.read())
        return body


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def _ledger(port: int, group: str) -> dict[str, float]:
    """The period's (today's) spend in the ledger by key or team, from the admin API."""
    day = time.strftime("%Y-%m-%d", time.gmtime())
    status, body = admin_call(port, "GET", f"spend?group_by={group}&from={day}&to={day}")
    assert status == 200, body
    return {row[group]: row["cost_usd"] for row in body["data"]}


def _until(cond: Callable[[], bool], deadline_s: float = 15.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < deadline_s, f"not within {deadline_s} s"
        time.sleep(0.05)  # polling other processes' state against a deadline


def _new_key(port: int, name: str, **limits: Any) -> str:
    """A stored key, once every process behind `port` knows it (`--workers`: each worker's cache follows
    the store on its own poll): ten reads of its spend in a row answer 200, which spends nothing."""
    status, body = admin_call(port, "POST", "keys", {"name": name, **limits})
    assert status == 201, body
    key, streak = str(body["key"]), [0]

    def known() -> bool:
        try:
            _spend(port, key)
            streak[0] += 1
        except urllib.error.HTTPError:
            streak[0] = 0
        return streak[0] >= 10

    _until(known)
    return key


def _cost_of_one(port: int) -> float:
    """What one request of `PROMPT` costs (the mock answers alike every time), read back as a key sees it."""
    probe = _new_key(port, "probe")
    assert _chat(port, probe)[0] == 200
    return float(_spend(port, probe)["spend_usd"])


def _spend_until_refused(port: int, key: str, most: int = 10) -> int:
    """Requests until the first 429 (at most `most`); the number answered 200."""
    for answered in range(most):
        status, _ = _chat(port, key)
        if status == 429:
            return answered
        assert status == 200
    return most


def test_sqlite_with_memory_state_restarted_again_and_again_never_forgets_the_days_spend(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path, raw_config(f"sqlite:///{tmp_path}/gw.db"))
    gw.start()
    try:
        cost = _cost_of_one(gw.port)
        assert admin_call(gw.port, "POST", "teams", {"name": "t", "budget_usd": 1.5 * cost})[0] == 201
        in_team, own = _new_key(gw.port, "in-team", team="t"), _new_key(gw.port, "own", budget_usd=1.5 * cost)
        for restart in range(4):
            if restart:
                gw.stop()
                gw.start()
            answered = _spend_until_refused(gw.port, in_team), _spend_until_refused(gw.port, own)
            assert answered == ((2, 2) if restart == 0 else (0, 0)), f"restart {restart}: {answered}"
            # the figure budgets use is the ledger's (the admin API reads the ledger)
            teams, keys = _ledger(gw.port, "team"), _ledger(gw.port, "key")
            assert _spend(gw.port, own)["spend_usd"] == pytest.approx(keys["own"])
            seen = _spend(gw.port, in_team)
            assert seen["team"]["spend_usd"] == pytest.approx(teams["t"])
            assert (seen["budget_usd"], seen["limited_by"]) == (pytest.approx(1.5 * cost), "team")
            assert seen["remaining_usd"] == 0
        assert teams["t"] <= 1.5 * cost + cost
        assert keys["own"] <= 1.5 * cost + cost
        _a_budget_refusal_is_not_retried(gw.port, in_team)
    finally:
        gw.stop()


def _a_budget_refusal_is_not_retried(port: int, key: str) -> None:
    """`Retry-After` is the time until the day ends, `x-should-retry: false`; the official SDKs, with their
    retries on, send the request exactly once (OpenAI's and Anthropic's error shapes)."""
    status, headers = _chat(port, key)
    assert status == 429
    assert headers["x-should-retry"] == "false"
    assert abs(int(headers["Retry-After"]) - seconds_until_reset("day", time.time())) <= 5
    sent: list[str] = []
    hooks = {"request": [lambda request: sent.append(str(request.url))]}
    oai = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=2,
                        http_client=openai.DefaultHttpxClient(event_hooks=hooks))
    with pytest.raises(openai.RateLimitError) as refused:
        oai.chat.completions.create(model="m", messages=PROMPT)  # type: ignore[arg-type]
    assert refused.value.code == "budget_exceeded"
    claude = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=key, max_retries=2,
                                 http_client=openai.DefaultHttpxClient(event_hooks=hooks))
    with pytest.raises(anthropic.RateLimitError) as refused_too:
        claude.messages.create(model="m", max_tokens=16, messages=PROMPT)  # type: ignore[arg-type]
    assert refused_too.value.response.headers["x-should-retry"] == "false"
    assert int(refused_too.value.response.headers["Retry-After"]) > 0
    assert [url.rsplit("/", 1)[-1] for url in sent] == ["completions", "messages"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_two_workers_with_a_store_serve_and_share_the_budget_across_restarts(
        dialect: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path}/gw.db" if dialect == "sqlite" else request.getfixturevalue("postgres").new_database()
    gw = GatewayProcess(tmp_path, raw_config(url), extra_args=("--workers", "2"))
    gw.start()
    try:
        cost = _cost_of_one(gw.port)
        # below one request's cost: each worker admits at most its first request, whatever its view
        assert admin_call(gw.port, "POST", "teams", {"name": "t", "budget_usd": 0.5 * cost})[0] == 201
        key = _new_key(gw.port, "k", team="t")
        # the supervisor serves /metrics and runs no store client: its 0 must not read as a store that is down
        _until(lambda: "llm_gateway_store_up 1.0" in _metrics(gw.metrics_port))
        for restart in range(3):
            if restart:
                gw.stop()
                gw.start()
            for _ in range(6):
                _chat(gw.port, key)
        spent = _ledger(gw.port, "team")["t"]
        assert spent <= 0.5 * cost + 2 * cost  # one request's cost per worker, after every restart
        # every worker's figure comes to the ledger's: ten answers in a row, from either worker
        streak = [0]

        def agreed() -> bool:
            same = _spend(gw.port, key)["team"]["spend_usd"] == pytest.approx(_ledger(gw.port, "team")["t"])
            streak[0] = streak[0] + 1 if same else 0
            return streak[0] >= 10

        _until(agreed)
    finally:
        gw.stop()


def test_two_replicas_on_postgres_and_redis_keep_one_budget_through_restarts_and_an_emptied_redis(
        postgres: PostgresServer, tmp_path: Path) -> None:
    raw = raw_config(postgres.new_database())
    with RedisServer() as redis:
        raw["state"] = {"backend": "redis", "redis_url": redis.url}
        with two_replicas(tmp_path, raw) as (a, b):
            cost = _cost_of_one(a.port)
            key = _new_key(a.port, "k", budget_usd=2.5 * cost)
            _until(lambda: _chat(b.port, key)[0] == 200)  # b knows the key (its cache follows the store)
            assert _spend_until_refused(a.port, key) + 1 == 3  # shared: 3 requests in all reach 2.5 costs
            assert _chat(b.port, key)[0] == 429

            def ledger_figure_everywhere() -> bool:
                spent = _ledger(a.port, "key")["k"]
                return all(_spend(gw.port, key)["spend_usd"] == pytest.approx(spent) for gw in (a, b))

            for gw in (a, b):  # Redis holds the spend: the restarted replicas do not add the ledger to it
                gw.stop()
                gw.start()
            assert ledger_figure_everywhere()
            assert (_chat(a.port, key)[0], _chat(b.port, key)[0]) == (429, 429)
            redis.kill()  # Redis comes back empty under the running replicas: they seed it again
            redis.start()
            _until(ledger_figure_everywhere)
            assert (_chat(a.port, key)[0], _chat(b.port, key)[0]) == (429, 429)
            redis.kill()  # ... and empty before they start
            redis.start()
            for gw in (a, b):
                gw.stop()
                gw.start()
            assert (_chat(a.port, key)[0], _chat(b.port, key)[0]) == (429, 429)
            assert ledger_figure_everywhere()
            assert _ledger(a.port, "key")["k"] <= 2.5 * cost + 2 * cost
