"""Routing end to end (issue #59; docs/routing.md): the gateway on 127.0.0.1, the official openai SDK as
its client, one scripted upstream serving every deployment under its own path with a set time to first
token. Scaled down from the issue's 50/150/400 ms and 2,000 requests to keep the run short (the full-size
numbers are proven on an injected clock in tests/unit/test_routing_policies.py); the routing clock is
moved forward instead of waiting the 30 s a probe waits for.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from tests.chat_scripts import completion, error_script, text_stream
from tests.fake_upstream import FakeUpstream, Pause, Script, ScriptFor
from tests.harness import GatewayServer, LoopThread

# routes by measured latency: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

MESSAGES = [{"role": "user", "content": "hi"}]
BREAKER = {"failures": 1, "window_s": 60, "cooldown_s": 600}  # a failing deployment stays out for the test


def path(name: str) -> str:
    return f"/{name}/v1/chat/completions"


def config(url: str, routing: str, deployments: list[dict[str, Any]], **model: Any) -> Any:
    names = [d["name"] for d in deployments]
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {n: {"type": "openai", "base_url": f"{url}/{n}/v1", "api_key": "k", "breaker": BREAKER}
                      for n in names},
        "models": [{"name": "m", "routing": routing, **model,
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5},
                    "deployments": [{"provider": d.pop("name"), "model": "up", **d} for d in deployments]}],
    }, env={})


@pytest.fixture
def servers() -> Iterator[tuple[LoopThread, FakeUpstream]]:
    loop, upstream = LoopThread(), FakeUpstream()
    loop.run(upstream.start())
    try:
        yield loop, upstream
    finally:
        loop.run(upstream.stop())
        loop.stop()


@pytest.fixture
def start(servers: tuple[LoopThread, FakeUpstream]) -> Iterator[Callable[[Any], GatewayServer]]:
    loop, _ = servers
    started: list[GatewayServer] = []

    def go(cfg: Any) -> GatewayServer:
        gw = GatewayServer(cfg)
        loop.run(gw.start())
        started.append(gw)
        return gw

    yield go
    for gw in started:
        loop.run(gw.stop())


def answer_after(ttft_s: float) -> Script:
    script = text_stream(["fast ", "enough"])
    script.parts.insert(0, Pause(ttft_s))
    return script


def body_answer() -> Script:
    return completion("ok")


def served_by(gw: GatewayServer, n: int, *, stream: bool = False, sessions: list[str] | None = None,
              workers: int = 8) -> list[str]:
    """`n` requests, `workers` at a time; the deployment that answered each (x-gateway-deployment, or for a
    stream the upstream path the caller counts)."""
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=30)

    def one(i: int) -> str:
        headers = {"X-Claude-Code-Session-Id": sessions[i]} if sessions else None
        if stream:
            for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True, extra_headers=headers):
                pass
            return ""
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, extra_headers=headers)
        return raw.headers["x-gateway-deployment"]

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(n)))


def test_weighted_splits_first_choices_by_weight_and_counts_them(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    _, upstream = servers
    for n in ("a", "b", "c"):
        upstream.defaults[path(n)] = body_answer()
    gw = start(config(upstream.base_url, "weighted", [{"name": "a", "weight": 70}, {"name": "b", "weight": 20},
                                                       {"name": "c", "weight": 10}]))
    assert gw.app is not None
    gw.app.runtime.rand.seed(59)  # the draws in order, whatever the requests' interleaving: the same counts
    for n in ("a", "b", "c"):  # every series at 0 from start
        assert f'llm_gateway_routing_decisions_total{{deployment="{n}/up",model="m",policy="weighted"}} 0.0' \
            in gw.scrape()
    got = Counter(served_by(gw, 400))
    for n, share in (("a", 0.70), ("b", 0.20), ("c", 0.10)):
        assert abs(got[f"{n}/up"] / 400 - share) <= 0.08, got  # ~3.5 standard deviations at 400
        assert gw.sample("llm_gateway_routing_decisions_total", deployment=f"{n}/up", policy="weighted") \
            == got[f"{n}/up"]


def test_latency_prefers_the_fastest_sheds_it_when_slow_and_takes_it_back_after_its_probe(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    _, upstream = servers
    # far apart, beyond the 20 ms margin and the loop's own noise on a busy machine (the 50, 150
    # and 400 ms, and 600 ms once slow, with the fastest made faster)
    ttft = {"fast": 0.010, "mid": 0.150, "slow": 0.400}
    for n, s in ttft.items():
        upstream.defaults[path(n)] = answer_after(s)
    gw = start(config(upstream.base_url, "latency", [{"name": n} for n in ttft]))
    assert gw.app is not None
    offset = [0.0]
    gw.app.runtime.mono = lambda: time.monotonic() + offset[0]  # the routing clock, moved by the test

    def shares(n: int, workers: int = 8) -> Counter[str]:
        before = len(upstream.received)
        served_by(gw, n, stream=True, workers=workers)
        return Counter(r.path.split("/")[1] for r in upstream.received[before:])

    shares(24)  # the first probes, on cold connections and a cold process: what they learn is noise
    offset[0] += 30.0
    assert shares(3, workers=1) == {"fast": 1, "mid": 1, "slow": 1}  # 30 s later: each probed again, warm
    assert shares(160)["fast"] >= 0.85 * 160
    assert gw.sample("llm_gateway_deployment_ttft_seconds", deployment="fast/up", api="chat") \
        < gw.sample("llm_gateway_deployment_ttft_seconds", deployment="mid/up", api="chat")

    upstream.defaults[path("fast")] = answer_after(0.600)  # the fastest slows down
    deadline = time.monotonic() + 10.0
    while (recent := shares(16))["mid"] < 14:
        assert time.monotonic() < deadline, f"still not shed after 10 s: {recent}"
    assert shares(48)["fast"] == 0  # shed: no traffic and no probe before 30 s without data

    upstream.defaults[path("fast")] = answer_after(0.010)  # it recovers
    offset[0] += 30.0  # 30 s later its data is stale: the next request probes it
    got = shares(48, workers=1)  # one at a time: the first request is its probe, and it lands before the next
    assert got["fast"] >= 0.85 * 48 and got["fast"] + got["mid"] + got["slow"] == 48, got  # back at once


def test_cost_picks_the_cheapest_unless_it_fails(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    _, upstream = servers
    for n in ("dear", "cheap"):
        upstream.defaults[path(n)] = body_answer()
    gw = start(config(upstream.base_url, "cost", [{"name": "dear", "price": {"input": 2.5, "output": 10}},
                                                   {"name": "cheap", "price": {"input": 0.15, "output": 0.6}}]))
    assert set(served_by(gw, 30)) == {"cheap/up"}
    upstream.defaults[path("cheap")] = error_script(500, None, "down", "server_error")
    assert set(served_by(gw, 20, workers=1)) == {"dear/up"}  # the fallback served, then it is first choice
    assert gw.sample("llm_gateway_routing_decisions_total", deployment="dear/up", policy="cost") >= 19


def test_a_later_tier_gets_no_traffic_while_the_first_serves_and_all_of_it_when_it_is_down(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    _, upstream = servers
    for n in ("p1", "p2", "backup"):
        upstream.defaults[path(n)] = body_answer()
    gw = start(config(upstream.base_url, "balanced", [{"name": "p1"}, {"name": "p2"},
                                                       {"name": "backup", "tier": 1}]))
    got = Counter(served_by(gw, 60))
    assert got["backup/up"] == 0 and got["p1/up"] > 0 and got["p2/up"] > 0
    assert not any(r.path == path("backup") for r in upstream.received)
    for n in ("p1", "p2"):
        upstream.defaults[path(n)] = error_script(503, None, "down", "server_error")
    assert set(served_by(gw, 40)) == {"backup/up"}


@pytest.mark.parametrize("routing", ["balanced", "weighted", "latency", "ordered"])
def test_no_session_id_reaches_a_later_tier_while_the_first_serves(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer], routing: str) -> None:
    """Issue #59 acceptance 2, issue #55 finding 5: 200 random session ids, affinity on, two tiers."""
    _, upstream = servers
    for n in ("home1", "home2", "last-resort"):
        upstream.defaults[path(n)] = body_answer()
    gw = start(config(upstream.base_url, routing, [{"name": "home1"}, {"name": "home2"},
                                                    {"name": "last-resort", "tier": 1}], affinity="session"))
    rng = random.Random(55)
    sessions = [rng.randbytes(12).hex() for _ in range(200)]
    got = Counter(served_by(gw, 200, sessions=sessions))
    assert got["last-resort/up"] == 0, got
    if routing == "ordered":
        assert got == {"home1/up": 200}  # affinity does not apply: the client cannot choose home2 either
    else:
        assert got["home1/up"] > 40 and got["home2/up"] > 40  # sessions still spread over the first tier


def test_a_hedge_starts_on_the_next_deployment_of_the_same_policy(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    """Under `latency` the hedge goes to the next fastest, not the next in config order."""
    _, upstream = servers
    ttft = {"fast": 0.005, "slow": 0.150, "mid": 0.060}
    for n, s in ttft.items():
        upstream.defaults[path(n)] = answer_after(s)
    # the hedge comes after every deployment's usual first token, so no probe is hedged away
    gw = start(config(upstream.base_url, "latency", [{"name": n} for n in ttft], hedge_after_ms=250))
    served_by(gw, 20, stream=True, workers=1)  # each probed once, then learned
    upstream.enqueue(path("fast"), answer_after(0.600))  # the fastest is late this once
    before = len(upstream.received)
    served_by(gw, 1, stream=True, workers=1)
    assert [r.path.split("/")[1] for r in upstream.received[before:]] == ["fast", "mid"]
    assert gw.sample("llm_gateway_hedges_total", winner="hedge") == 1


def test_a_request_that_teaches_nothing_never_takes_a_latency_probe(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    """Only a stream's first token is a sample (docs/routing.md, latency): a non-streamed request that took
    a recovered deployment's probe learned nothing and left it shed for another 30 s, so on a model with
    non-streamed traffic too a recovered deployment stayed out for minutes, not "back within 30 s"."""
    _, upstream = servers
    ttft = {"late": 0.300, "fast": 0.010}  # `late` first in config order: the first due a probe

    def answering(name: str) -> ScriptFor:  # a stream to a stream request, a body to any other
        def script(headers: dict[str, str]) -> Script:
            accept = {k.lower(): v for k, v in headers.items()}.get("accept", "")
            return answer_after(ttft[name]) if "event-stream" in accept else body_answer()
        return script

    for n in ttft:
        upstream.enqueue(path(n), *[answering(n)] * 200)
    gw = start(config(upstream.base_url, "latency", [{"name": n} for n in ttft]))
    assert gw.app is not None
    offset = [0.0]
    gw.app.runtime.mono = lambda: time.monotonic() + offset[0]

    def streamed_to(n: int) -> Counter[str]:
        before = len(upstream.received)
        served_by(gw, n, stream=True, workers=1)
        return Counter(r.path.split("/")[1] for r in upstream.received[before:])

    streamed_to(4)  # cold probes: noise
    offset[0] += 30.0
    streamed_to(2)  # each probed again, warm: `late` is shed
    deadline = time.monotonic() + 10.0
    while streamed_to(8)["late"]:
        assert time.monotonic() < deadline, "late never shed"

    ttft["late"] = 0.010  # it recovers
    offset[0] += 30.0  # both stale: due a probe each, `late` first
    assert served_by(gw, 1, workers=1) == ["fast/up"]  # not streamed: by the ranking, and no probe taken
    got = streamed_to(8)
    assert got["late"] >= 1, got  # its probe went to a stream, which measured it


def test_a_hedge_stays_in_the_primarys_tier(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    """A later tier gets no traffic while the first can serve (docs/routing.md, "Tiers"): a primary that is
    only slow is hedged on the next deployment of its own tier, and with none left there, not at all. (The
    hedge went to the next deployment of the plan, a later tier's, and as it answered at once it won.)"""
    _, upstream = servers
    upstream.defaults[path("slow")] = answer_after(0.400)
    for n in ("spare", "backup"):
        upstream.defaults[path(n)] = answer_after(0.0)
    alone = start(config(upstream.base_url, "ordered", [{"name": "slow"}, {"name": "backup", "tier": 1}],
                         hedge_after_ms=100))
    served_by(alone, 1, stream=True, workers=1)
    assert [r.path for r in upstream.received] == [path("slow")]  # slow, not down: no hedge into tier 1
    assert alone.sample("llm_gateway_hedges_total") == 0

    upstream.received.clear()
    two = start(config(upstream.base_url, "ordered", [{"name": "slow"}, {"name": "spare"},
                                                      {"name": "backup", "tier": 1}], hedge_after_ms=100))
    served_by(two, 1, stream=True, workers=1)
    assert [r.path for r in upstream.received] == [path("slow"), path("spare")]  # the hedge in its tier
    assert two.sample("llm_gateway_hedges_total", winner="hedge") == 1


def test_a_first_tier_of_weight_0_deployments_only_serves_as_a_fallback(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    """`weight: 0` serves only as a fallback (docs/routing.md, "weighted"): a tier with no weight above 0
    has no first choice, so the first tier that has one serves first, the weight-0 tier behind it. (Tier 0
    served every request, drained or not.)"""
    _, upstream = servers
    for n in ("drained", "live"):
        upstream.defaults[path(n)] = body_answer()
    gw = start(config(upstream.base_url, "weighted", [{"name": "drained", "weight": 0},
                                                       {"name": "live", "tier": 1}]))
    assert set(served_by(gw, 20)) == {"live/up"}
    assert gw.sample("llm_gateway_routing_decisions_total", deployment="live/up") == 20
    upstream.defaults[path("live")] = error_script(503, None, "down", "server_error")
    assert set(served_by(gw, 5, workers=1)) == {"drained/up"}  # the fallback still serves


def test_a_latency_probe_to_another_deployment_counts_its_session_moved(
        servers: tuple[LoopThread, FakeUpstream], start: Callable[[Any], GatewayServer]) -> None:
    """`llm_gateway_affinity_total` compares the deployment that served with the session's home, the first
    of its ranking among the policy's first choices. A `latency` probe goes first, ahead of the home: the
    probe's deployment was taken for the home, so a probe that served counted `kept` while the session was
    moved off its home (and one that failed, the home serving, `moved`)."""
    _, upstream = servers
    upstream.defaults[path("recovering")] = answer_after(0.150)  # beyond the margin: never a first choice
    upstream.defaults[path("fast")] = answer_after(0.0)
    gw = start(config(upstream.base_url, "latency", [{"name": "recovering"}, {"name": "fast"}],
                      affinity="session"))
    assert gw.app is not None
    offset = [0.0]
    gw.app.runtime.mono = lambda: time.monotonic() + offset[0]
    served_by(gw, 2, stream=True, workers=1)  # each probed once: learned
    offset[0] += 1.0  # ranked again: `fast` is every session's home
    before = len(upstream.received)
    served_by(gw, 2, stream=True, workers=1, sessions=["s", "s"])
    assert [r.path for r in upstream.received[before:]] == [path("fast")] * 2
    assert (gw.sample("llm_gateway_affinity_total", result="new"),
            gw.sample("llm_gateway_affinity_total", result="kept")) == (1, 1)

    offset[0] += 30.0  # no sample for 30 s: `recovering` is due its probe, which the session's request carries
    before = len(upstream.received)
    served_by(gw, 1, stream=True, workers=1, sessions=["s"])
    assert [r.path for r in upstream.received[before:]] == [path("recovering")]
    assert (gw.sample("llm_gateway_affinity_total", result="kept"),
            gw.sample("llm_gateway_affinity_total", result="moved")) == (1, 1)
