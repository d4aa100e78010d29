"""A key's own limits and its team's, both enforced, neither spent by what the other refused
(docs/keys-teams-spend.md): stored keys and teams made through the admin API of a gateway on 127.0.0.1 with
a SQLite store, on memory state and on a real redis-server, the official SDKs as clients.

- a key refused by its own rpm spends nothing of its team's: its teammates are still served:
  test_a_key_refused_by_its_own_rpm_leaves_its_teams_rpm_to_its_teammates
- a request the team's rpm refuses is taken back from the key's own rpm:
  test_a_request_its_team_refuses_is_not_counted_against_the_keys_own_rpm
- count_tokens counts against rpm only, the team's too: a team's `tpm: 0` does not refuse it:
  test_count_tokens_counts_against_the_teams_rpm_not_its_tpm
- a key moved to another team counts against the new team's limits at once, and a team's budget is
  enforced beside the key's: test_a_key_moved_to_another_team_counts_against_the_new_ones_limits
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from tests.control_plane import admin_call, raw_config
from tests.harness import GatewayServer, LoopThread
from tests.redis_server import RedisServer

T0 = 1_700_000_040.0  # the start of a minute: every request of a test in one minute
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "memory":
        yield {"backend": "memory"}
        return
    with RedisServer() as redis:
        yield {"backend": "redis", "redis_url": redis.url, "timeout_ms": 1000}


@pytest.fixture
def gw(servers: LoopThread, tmp_path: Path, state: dict[str, Any]) -> Iterator[GatewayServer]:
    gateway = GatewayServer(parse_config({**raw_config(f"sqlite:///{tmp_path}/gateway.db"), "state": state}, env={}))
    servers.run(gateway.start())
    assert gateway.app is not None
    gateway.app.runtime.clock = lambda: T0 + 1
    yield gateway
    servers.run(gateway.stop())


def team(gw: GatewayServer, name: str, **limits: Any) -> None:
    status, body = admin_call(gw.port, "POST", "teams", {"name": name, **limits})
    assert status == 201, body


def key(gw: GatewayServer, name: str, **fields: Any) -> str:
    status, body = admin_call(gw.port, "POST", "keys", {"name": name, **fields})
    assert status == 201, body
    return str(body["key"])


def chat(gw: GatewayServer, secret: str) -> str:
    """`ok`, or the error's code and whose limit it names."""
    try:
        openai.OpenAI(base_url=gw.base_url, api_key=secret, max_retries=0, timeout=20).chat.completions.create(
            model="m", messages=HI)  # type: ignore[arg-type]
    except openai.APIStatusError as exc:
        whose = re.search(r"(key|team) [\w.-]+", str(exc.message))
        return f"{exc.code}: {whose.group(0) if whose else exc.message}"
    return "ok"


def test_a_key_refused_by_its_own_rpm_leaves_its_teams_rpm_to_its_teammates(gw: GatewayServer) -> None:
    """Before, the team's rpm was counted first: the key's three refused requests used up the team's
    three, and its teammate was refused for them."""
    team(gw, "t", rpm=3)
    noisy, quiet = key(gw, "noisy", team="t", rpm=1), key(gw, "quiet", team="t")
    assert [chat(gw, noisy) for _ in range(4)] == ["ok"] + ["rate_limit_exceeded: key noisy"] * 3
    assert [chat(gw, quiet) for _ in range(3)] == ["ok", "ok", "rate_limit_exceeded: team t"]
    # a refusal by the team's limit is counted for the key refused, as one by its own (it was not, before)
    assert gw.sample("llm_gateway_rate_limited_total", key="noisy", limit="rpm") == 3
    assert gw.sample("llm_gateway_rate_limited_total", key="quiet", limit="rpm") == 1


def test_a_request_its_team_refuses_is_not_counted_against_the_keys_own_rpm(gw: GatewayServer) -> None:
    team(gw, "t", rpm=1)
    first, second = key(gw, "first", team="t"), key(gw, "second", team="t", rpm=2)
    assert chat(gw, first) == "ok"  # the team's one request
    assert chat(gw, second) == "rate_limit_exceeded: team t"
    assert admin_call(gw.port, "PATCH", "teams/t", {"rpm": 10})[0] == 200  # in force at once here
    # before, the refused request had counted against the key's own 2: only one more was served
    assert [chat(gw, second) for _ in range(3)] == ["ok", "ok", "rate_limit_exceeded: key second"]


def test_count_tokens_counts_against_the_teams_rpm_not_its_tpm(gw: GatewayServer) -> None:
    """docs/keys-teams-spend.md, "A limit of 0": `tpm: 0` refuses every request that spends tokens, and
    count_tokens spends none. Before, the team's tpm was checked for it (and refused it)."""
    team(gw, "t", rpm=2, tpm=0)
    secret = key(gw, "a", team="t")
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key=secret, max_retries=0, timeout=20)
    assert client.messages.count_tokens(model="m", messages=HI).input_tokens > 0  # type: ignore[arg-type]
    assert chat(gw, secret) == "rate_limit_exceeded: team t"  # tpm 0: what spends tokens is refused
    with pytest.raises(anthropic.RateLimitError):  # the team's rpm: 2 requests, the chat's taken back
        for _ in range(2):
            client.messages.count_tokens(model="m", messages=HI)  # type: ignore[arg-type]


def test_a_key_moved_to_another_team_counts_against_the_new_ones_limits(gw: GatewayServer) -> None:
    team(gw, "small", rpm=1)
    team(gw, "large", rpm=5, budget_usd=0)
    secret = key(gw, "a", team="small")
    assert [chat(gw, secret) for _ in range(2)] == ["ok", "rate_limit_exceeded: team small"]
    assert admin_call(gw.port, "PATCH", "keys/a", {"team": "large"})[0] == 200
    assert chat(gw, secret) == "budget_exceeded: team large"  # its budget, beside its rpm
    assert admin_call(gw.port, "PATCH", "teams/large", {"budget_usd": 100})[0] == 200
    assert [chat(gw, secret) for _ in range(2)] == ["ok", "ok"]
