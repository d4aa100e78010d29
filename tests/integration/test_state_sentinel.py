"""Two gateway replicas on Redis through Sentinel (1 primary, 1 replica, 3 Sentinels on loopback): limits,
budgets and the cache are shared; the master killed under load costs no request, and the new master
is found (docs/scale-out.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from gateway.config.types import CacheConfig, SentinelConfig, StateConfig
from gateway.state.base import create_backend
from gateway.state.keys import spend_key
from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.redis_topologies import RedisSentinels
from tests.scaleout_load import (
    LOAD_KEY,
    PATH,
    SCRIPTS,
    STREAMS,
    Make,
    StreamLoad,
    admitted_while_shared,
    burst,
    error_code,
    fail_over_under_load,
    poll,
    replicas,
    script_sha,
    sdk,
    spare_keys,
    spares,
    status_of,
)

# times a Sentinel failover under load: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

# wide enough that a busy test machine does not flip a replica to local counting where the test counts
# shared admissions exactly (the budget itself is test_state_degraded.py's)
FAILOVER_MS = 300


@pytest.fixture
def sentinels() -> Iterator[RedisSentinels]:
    with RedisSentinels() as running:
        yield running


def through(sentinels: RedisSentinels, timeout_ms: int) -> dict[str, Any]:
    return {"redis_mode": "sentinel", "sentinel": {"master": sentinels.master, "urls": sentinels.urls},
            "timeout_ms": timeout_ms}


def test_sentinel_replicas_share_then_survive_a_master_failover(
        sentinels: RedisSentinels, upstream: FakeUpstream, make_gateway: Make) -> None:
    keys = [LOAD_KEY, *spares("s-rpm", "k-rpm", 5), *spares("s-after", "k-after", 5),
            {"name": "s-budget", "key": "k-budget", "budget_usd": 0.01}]
    gws = replicas(make_gateway, upstream.base_url, through(sentinels, FAILOVER_MS), keys)
    upstream.defaults[PATH] = completion("ok")
    assert admitted_while_shared(gws, spare_keys("k-rpm"), 8) == 5
    assert status_of(gws[0], "k-budget") == 200
    poll(lambda: error_code(gws[1], "k-budget") == "budget_exceeded", "the other replica to see the spend")
    upstream.enqueue(PATH, completion("cached once"))
    ask = [{"role": "user", "content": "c"}]
    answers = [sdk(g, "key-load").chat.completions.create(model="m", messages=ask)
               for g in gws]
    assert [a.choices[0].message.content for a in answers] == ["cached once", "cached once"]

    upstream.defaults[PATH] = text_stream(["a ", "stream"])
    with capture_logs() as logs, StreamLoad(gws, STREAMS) as load:
        failover = fail_over_under_load(gws, load, sentinels.kill_master, sentinels.wait_failover)
    failover.report(load, "sentinel")
    assert set(load.outcomes) == {200}, [o for o in load.outcomes if o != 200]
    events = [e["event"] for e in logs if e["event"].startswith("state_backend_")]
    assert events.count("state_backend_degraded") >= 2 and events.count("state_backend_restored") >= 2, events
    assert admitted_while_shared(gws, spare_keys("k-after"), 8) == 5, "shared again, on the new master"


async def test_a_burst_beyond_the_default_connection_cap_stays_shared(sentinels: RedisSentinels) -> None:
    """redis-py's Sentinel pool refuses a connection over its cap instead of queueing: 300 operations at
    once must not count as Redis being away."""
    state = StateConfig(backend="redis", redis_mode="sentinel", timeout_ms=2000,
                        sentinel=SentinelConfig(master=sentinels.master, urls=tuple(sentinels.urls)))
    modes, decisions = await burst(state, ["burst"] * 300)
    assert modes == [] and all(decision.allowed for decision in decisions)


async def test_the_new_master_has_the_scripts_and_the_spend_before_shared_counting_resumes(
        sentinels: RedisSentinels) -> None:
    """A promoted replica has an empty script cache: the probe loads every script before switching back,
    so the first requests after a failover do not each pay NOSCRIPT, a load and a retry within their
    deadline; the spend counted locally during the gap is on the new master by then too."""
    modes: list[bool] = []
    state = StateConfig(backend="redis", redis_mode="sentinel", timeout_ms=FAILOVER_MS,
                        sentinel=SentinelConfig(master=sentinels.master, urls=tuple(sentinels.urls)))
    backend = create_backend(state, CacheConfig(), lambda _reason: None, modes.append)
    now = time.time()
    try:
        assert (await backend.check_request("scripts", 10, None, 0, now))[0].allowed
        old = sentinels.kill_master()
        await backend.add_spend("scripts", "day", 0.25, now)  # fails: held locally, degraded
        assert modes == [True]
        new = await asyncio.to_thread(sentinels.wait_failover, old)
        await wait_for(lambda: modes == [True, False], "the backend to count in Redis again")
        master = redis.Redis(port=new.port)
        assert master.script_exists(*(script_sha(s) for s in SCRIPTS)) == [True] * len(SCRIPTS)
        assert float(master.get(spend_key("scripts", "day", now)) or 0) == 0.25
    finally:
        await backend.close()


async def wait_for(cond: Callable[[], bool], what: str, within_s: float = 15.0) -> None:
    """Poll a state a background task changes (the recovery probe); bounded, fails loudly."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not cond():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)  # polling a background task's effect, bounded by the deadline
