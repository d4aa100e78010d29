"""While Redis is away each process counts its share of a limit, limit / (replicas x workers), and no
operation waits longer than `state.timeout_ms` (docs/scale-out.md)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway.config import parse_config
from gateway.config.types import CacheConfig, StateConfig
from gateway.state.base import create_backend
from tests.chat_scripts import completion
from tests.fake_upstream import FakeUpstream
from tests.ports import free_port
from tests.redis_server import RedisServer
from tests.scaleout_load import PATH, Make, degraded, error_code, poll, raw, replicas, status_of

# times the state backend's outage and recovery: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def test_each_replica_admits_its_share_while_redis_is_down(
        redis_server: RedisServer, upstream: FakeUpstream, make_gateway: Make) -> None:
    keys = [{"name": "shared", "key": "k", "rpm": 6}]
    state = {"redis_url": redis_server.url, "replicas": 2, "timeout_ms": 500}
    gws = replicas(make_gateway, upstream.base_url, state, keys)
    upstream.defaults[PATH] = completion("ok")
    assert status_of(gws[0], "k", "before") == 200 and not degraded(gws[0])
    redis_server.kill()
    # 6 rpm over 2 replicas: 3 each, counted locally; together the replicas admit the limit
    local = [[status_of(gw, "k", f"during {i}") for i in range(5)] for gw in gws]
    assert [s.count(200) for s in local] == [3, 3], local
    assert all(degraded(g) for g in gws)
    redis_server.start()
    poll(lambda: not any(degraded(g) for g in gws), "the replicas to count in Redis again")


def test_a_limit_of_zero_stays_zero_while_redis_is_down(
        redis_server: RedisServer, upstream: FakeUpstream, make_gateway: Make) -> None:
    """rpm 0 (or tpm 0) freezes a key: refused in Redis, and refused locally too, where a share is at
    least 1 only for a limit that is (docs/keys-teams-spend.md, "A limit of 0")."""
    keys = [{"name": "rpm0", "key": "k-rpm0", "rpm": 0}, {"name": "tpm0", "key": "k-tpm0", "tpm": 0}]
    gws = replicas(make_gateway, upstream.base_url, {"redis_url": redis_server.url, "timeout_ms": 500}, keys)
    upstream.defaults[PATH] = completion("ok")
    assert [error_code(gw, k) for gw in gws for k in ("k-rpm0", "k-tpm0")] == ["rate_limit_exceeded"] * 4
    redis_server.kill()
    local = [error_code(gw, k) for gw in gws for k in ("k-rpm0", "k-tpm0") for _ in range(3)]
    assert local == ["rate_limit_exceeded"] * 12 and all(degraded(g) for g in gws)


def test_a_replica_that_starts_while_redis_is_away_counts_budgets_from_the_ledger(
        tmp_path: Path, upstream: FakeUpstream, make_gateway: Make) -> None:
    """A replica (re)started during an outage had read no counter from Redis: it counted every budget
    from zero, and served a key that had used up its budget (docs/keys-teams-spend.md, Budgets). The
    ledger's figures are now its fallback's base until Redis answers."""
    store = {"url": f"sqlite:///{tmp_path}/gateway.db", "ledger_journal": "off"}  # rows committed at once
    keys = [{"name": "spender", "key": "k", "budget_usd": 0.03}]  # a request costs $0.018 (scaleout_load)
    upstream.defaults[PATH] = completion("ok")
    first = make_gateway(parse_config({**raw(upstream.base_url, {"backend": "memory"}, keys), "store": store},
                                      env={}))
    assert [status_of(first, "k", f"p{i}") for i in range(3)] == [200, 200, 429]
    nowhere = {"backend": "redis", "redis_url": f"redis://127.0.0.1:{free_port()}/0", "timeout_ms": 200}
    second = make_gateway(parse_config({**raw(upstream.base_url, nowhere, keys), "store": store}, env={}))
    assert degraded(second)
    assert error_code(second, "k") == "budget_exceeded"
    assert len(upstream.bodies(PATH)) == 2


async def test_no_operation_waits_longer_than_timeout_ms(redis_server: RedisServer) -> None:
    """A stalled Redis (SIGSTOP: connections accepted, never answered) holds an operation for the
    configured budget, then the process counts locally; a larger budget is waited for in full."""
    modes: list[bool] = []
    state = StateConfig(backend="redis", redis_url=redis_server.url, timeout_ms=1200)
    backend = create_backend(state, CacheConfig(), lambda _reason: None, modes.append)
    try:
        assert (await backend.check_request("k", 10, None, 0, 1_700_000_000.0))[0].allowed
        redis_server.pause()
        loop = asyncio.get_running_loop()
        started = loop.time()
        decision, _ = await backend.check_request("k", 10, None, 0, 1_700_000_000.0)
        waited = loop.time() - started
        assert decision.allowed and modes == [True]
        assert 1.1 <= waited < 1.2 + 1.0, "the budget is state.timeout_ms: waited for, and not much longer"
    finally:
        redis_server.resume()
        await backend.close()


def test_workers_split_the_share_and_export_the_gauge(tmp_path: Path) -> None:
    """`--workers 2`, Redis unreachable: each worker admits limit / (replicas x workers) = 4 / (1 x 2), so
    the process admits at most the limit; /metrics (the workers' files, aggregated) has the gauge beside
    the counter, each under its own name and type."""
    port, mport = free_port(), free_port()
    cfg = tmp_path / "gw.yaml"
    cfg.write_text("server: {host: 127.0.0.1}\nauth: {keys: [{name: team, key: k-team, rpm: 4}]}\n"
                   f"state: {{backend: redis, redis_url: 'redis://127.0.0.1:{free_port()}/0'}}\n"
                   "providers: {demo: {type: mock, ttft_ms: 1, token_delay_ms: 0}}\n"
                   "models: [{name: demo, deployments: [{provider: demo, model: demo-1}]}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port", str(port),
                             "--metrics-port", str(mport), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port)
        statuses = [fresh_status(port) for _ in range(16)]  # new connections: the kernel spreads them
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert 2 <= statuses.count(200) <= 4, statuses
    assert "# TYPE llm_gateway_state_degraded gauge\nllm_gateway_state_degraded 1.0" in text
    assert "# TYPE llm_gateway_state_degraded_total counter" in text


def fresh_status(port: int) -> int:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k-team", max_retries=0, timeout=10)
    try:
        client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "hi"}])
    except openai.APIStatusError as exc:
        return exc.status_code
    finally:
        client.close()
    return 200


def wait_ready(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.05)  # polling a child process for readiness, bounded by the deadline
    raise AssertionError("workers did not start")
