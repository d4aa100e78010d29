"""Session affinity across two gateway processes (issue #31, acceptance 3; CONTRACT §10).

20 coding-agent sessions x 10 turns over 3 balanced deployments of a scripted upstream whose deployments
each keep a prompt cache (`tests/cache_upstream.py`), every session's turns alternating between two
`gateway serve` processes that share nothing. With `affinity: session` every session stays on one
deployment (the two replicas agree), the sessions spread over all three, and at least 90% of the input is
read from the cache; the same traffic to the same deployments without affinity, measured in the same
test, reads far less. Then a session's home fails: its sessions move, on both replicas to the same next
deployment of their ranking, and return home once it has recovered (its breaker closed again).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from tests.cache_upstream import CachingUpstream
from tests.chat_scripts import chunk, error_script, text_stream
from tests.control_plane import GatewayProcess
from tests.fake_upstream import FakeUpstream, Hang, Script, sse
from tests.harness import GatewayServer, LoopThread

# times breakers' cooldowns across replicas: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

SESSIONS, TURNS = 20, 10
SYSTEM = "You are a coding agent. " + "Tool definitions and instructions. " * 460  # ~16k, every session's
TASK, RESULT = 1000, 2000  # a session's first message; what each turn adds (a tool's output)


def _raw(upstream_url: str) -> dict[str, Any]:
    def model(name: str, prefix: str, affinity: str) -> dict[str, Any]:
        return {"name": name, "routing": "balanced", "affinity": affinity,
                "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5},
                "deployments": [{"provider": "up", "model": f"{prefix}-{i}"} for i in range(3)]}
    return {
        "server": {"host": "127.0.0.1"},
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": upstream_url, "api_key": "sk-up-SECRET",
                             "breaker": {"failures": 1, "window_s": 60, "cooldown_s": 0.3}}},
        "models": [model("agent", "a", "session"), model("plain", "p", "off")],
    }


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[CachingUpstream, list[GatewayProcess]]]:
    servers = LoopThread()
    upstream = CachingUpstream()
    servers.run(upstream.start())
    replicas: list[GatewayProcess] = []
    try:
        for name in ("a", "b"):
            replicas.append(_started(tmp_path, _raw(upstream.base_url), name))
        yield upstream, replicas
    finally:
        for r in replicas:
            r.stop()
        servers.run(upstream.stop())
        servers.stop()


def _started(tmp_path: Path, raw: dict[str, Any], name: str) -> GatewayProcess:
    """A replica on free ports. A port picked free can be taken by another process before the gateway
    binds it (the machine runs other test suites): then once more on other ports."""
    for attempt in range(3):
        replica = GatewayProcess(tmp_path, raw, f"{name}{attempt}")
        try:
            replica.start()
            return replica
        except AssertionError:
            replica.stop()  # a replica that did not come up leaves no process behind
            if "address already in use" not in replica.log_path.read_text():
                raise
    raise AssertionError("no free ports for a replica")


def _session_id(i: int) -> str:
    return f"3f0c9a7e-5b1d-4c2a-9e8f-{i:012d}"


def _send(replica: GatewayProcess, model: str, session: int, turn: int) -> str:
    """One turn of a session, naming the session as Claude Code (its header), Codex (its header) or an
    OpenAI client (`prompt_cache_key`) does; returns the deployment that served it."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"session {session}: " + "t" * TASK}]
    for t in range(turn):
        messages += [{"role": "assistant", "content": f"call {t}"},
                     {"role": "user", "content": f"output {t}: " + "r" * RESULT}]
    sid = _session_id(session)
    headers, body = ({"X-Claude-Code-Session-Id": sid}, {}) if session % 3 == 0 else (
        ({"session-id": sid}, {}) if session % 3 == 1 else ({}, {"prompt_cache_key": sid}))
    c = openai.OpenAI(base_url=replica.base_url, api_key="none", max_retries=0, timeout=20)
    raw = c.chat.completions.with_raw_response.create(model=model, messages=messages,  # type: ignore[arg-type]
                                                      extra_headers=headers, extra_body=body)
    assert raw.parse().choices[0].message.content == "done"
    return raw.headers["x-gateway-deployment"]


def _conversation(replicas: list[GatewayProcess], model: str) -> dict[int, set[tuple[int, str]]]:
    """Every session's turns, interleaved as concurrent agents would be, each turn on the other replica
    than the one before; returns each session's (replica, deployment) pairs."""
    where: dict[int, set[tuple[int, str]]] = defaultdict(set)
    with ThreadPoolExecutor(8) as pool:
        for turn in range(TURNS):
            turns = {s: pool.submit(_send, replicas[(s + turn) % 2], model, s, turn) for s in range(SESSIONS)}
            for s, served in turns.items():
                where[s].add(((s + turn) % 2, served.result()))
    return where


def _cached_share(upstream: CachingUpstream, prefix: str) -> float:
    served = [s for s in upstream.served if s.deployment.startswith(prefix)]
    return sum(s.cached_tokens for s in served) / sum(s.input_tokens for s in served)


def _affinity(replica: GatewayProcess, result: str) -> float:
    url = f"http://127.0.0.1:{replica.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    line = f'llm_gateway_affinity_total{{model="agent",result="{result}"}} '
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line))


def test_sessions_stay_on_one_deployment_across_replicas_and_keep_the_cache_warm(
        setup: tuple[CachingUpstream, list[GatewayProcess]]) -> None:
    upstream, replicas = setup
    where = _conversation(replicas, "agent")
    homes = {}
    for s, pairs in where.items():
        assert {r for r, _ in pairs} == {0, 1}, s  # both replicas served the session...
        assert len({d for _, d in pairs}) == 1, (s, pairs)  # ...on one deployment
        homes[s] = next(iter(pairs))[1]
    assert set(homes.values()) == {"up/a-0", "up/a-1", "up/a-2"}
    with_affinity = _cached_share(upstream, "a-")
    _conversation(replicas, "plain")
    without = _cached_share(upstream, "p-")
    print(f"cache-read share of input: {with_affinity:.3f} with affinity, {without:.3f} without")
    assert with_affinity >= 0.90
    assert without < with_affinity - 0.06  # measured 0.82; 200 simulated runs of this traffic: 0.80 to 0.83
    new = sum(_affinity(r, "new") for r in replicas)
    kept = sum(_affinity(r, "kept") for r in replicas)
    assert (new, kept, sum(_affinity(r, "moved") for r in replicas)) == (2 * SESSIONS, SESSIONS * TURNS - new, 0)

    # the log lines carry the session hashed, never the id
    logs = "".join(r.log_path.read_text() for r in replicas)
    lines = [json.loads(x) for x in logs.splitlines() if x.startswith("{")]
    agent = [x for x in lines if x.get("event") == "request" and x["model"] == "agent"]
    assert len(agent) == SESSIONS * TURNS and len({x["session_hash"] for x in agent}) == SESSIONS
    assert {x["affinity"] for x in agent} == {"new", "kept"}
    assert not any(_session_id(s) in logs for s in range(SESSIONS))

    # a home fails: its sessions move, both replicas to the same deployment, and come back after
    failed = homes[0]
    upstream.failing.add(failed.removeprefix("up/"))
    moved = [s for s, home in homes.items() if home == failed]
    elsewhere: dict[int, set[str]] = defaultdict(set)
    for s in moved:
        for r in (0, 1, 0, 1):
            elsewhere[s].add(_send(replicas[r], "agent", s, TURNS))
    assert all(len(ds) == 1 and failed not in ds for ds in elsewhere.values()), elsewhere
    assert all(_affinity(r, "moved") >= len(moved) for r in replicas)
    upstream.failing.clear()
    deadline = time.monotonic() + 10
    back = set()
    while len(back) < 2 * len(moved):  # each replica's breaker admits its probe once its cooldown passes
        assert time.monotonic() < deadline, back
        for s in moved:
            for r in (0, 1):
                if (s, r) not in back and _send(replicas[r], "agent", s, TURNS) == failed:
                    back.add((s, r))
        time.sleep(0.05)  # polling the replicas' cooldowns against a deadline
    for s in moved:  # home for good: every later turn, on either replica
        assert {_send(replicas[r], "agent", s, TURNS) for r in (0, 1, 0, 1)} == {failed}


HEDGED = [f"/d{i}/v1/chat/completions" for i in range(3)]


def _hedged_config(url: str) -> Any:
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {f"d{i}": {"type": "openai", "base_url": f"{url}/d{i}/v1", "api_key": "k"} for i in range(3)},
        "models": [{"name": "h", "routing": "balanced", "affinity": "session", "hedge_after_ms": 100,
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5},
                    "deployments": [{"provider": f"d{i}", "model": f"h-{i}"} for i in range(3)]}],
    }, env={})


def _streamed(gw: GatewayServer, sid: str) -> str:
    c = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=30)
    raw = c.chat.completions.with_raw_response.create(model="h", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True, extra_headers={"X-Claude-Code-Session-Id": sid})
    assert "".join(ch.choices[0].delta.content or "" for ch in raw.parse() if ch.choices) == "ok"
    return raw.headers["x-gateway-deployment"]


def test_failover_and_hedges_follow_the_sessions_own_ranking(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """Its home failing before the first token, a session goes to the second of its own ranking; its
    home slow, the hedge goes there too (a balanced hedge would pick by load and chance)."""
    gw = make_gateway(_hedged_config(upstream.base_url))
    for path in HEDGED:
        upstream.defaults[path] = text_stream(["ok"])
    path_of = {f"d{i}/h-{i}": path for i, path in enumerate(HEDGED)}
    seconds = set()
    for s in range(6):
        sid = _session_id(s)
        home = _streamed(gw, sid)
        upstream.enqueue(path_of[home], error_script(500, None, "boom", "server_error"))
        second = _streamed(gw, sid)
        upstream.enqueue(path_of[home], Script([sse(chunk({"role": "assistant"})), Hang()]))
        assert (second != home, _streamed(gw, sid), _streamed(gw, sid)) == (True, second, home), s
        seconds.add(second)
    assert len(seconds) > 1  # the second choice is the session's, not the config's
    assert gw.sample("llm_gateway_hedges_total", model="h", winner="hedge") == 6
    assert (gw.sample("llm_gateway_affinity_total", model="h", result="moved"),
            gw.sample("llm_gateway_affinity_total", model="h", result="kept")) == (12, 6)
