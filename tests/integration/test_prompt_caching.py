"""Prompt caching across every hop (docs/caching.md), against scripted Anthropic-format upstreams that keep a
prompt cache per deployment (`tests/anthropic_cache_upstream.py`: reads only for prefixes written at a
marker, a fifth marker refused with Anthropic's 400).

For every client API (the official SDKs) x Anthropic-format provider (Anthropic, Bedrock InvokeModel, Vertex
rawPredict): a 10-turn conversation, after one earlier session of the same agent, reads >= 90% of its input
from the cache with the client's own markers and with `prompt_cache: {breakpoints: auto}` and none, and 0%
with neither; its turns alternate stream and body, and each answer's cached-token fields equal what the
upstream reported. The markers each upstream received are checked as its API documents them.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.anthropic_cache_upstream import OUTPUT_TOKENS, CachingClaudeUpstream, Served
from tests.chat_scripts import completion, error_script
from tests.fake_google import LOCATION, PROJECT
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread

TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
MODELS = {"anthropic": "claude-sonnet-4-5", "bedrock": "anthropic.claude-sonnet-4-5-v1", "vertex": "claude-sonnet-4-5"}
PRICE = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75, "cache_creation_input_1h": 6.0}
TURNS = 10
CHAT = "/v1/chat/completions"
EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


@pytest.fixture
def claude(servers: LoopThread) -> Iterator[CachingClaudeUpstream]:
    fake = CachingClaudeUpstream()
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


def config(fake: CachingClaudeUpstream, tmp_path: Path, store: bool = False) -> dict[str, Any]:
    sa = fake.service_account_file(tmp_path)
    providers = {
        "anthropic": {"type": "anthropic", "base_url": fake.base_url, "api_key": "sk-ant-SECRET", "timeouts": TIMEOUTS},
        "bedrock": {"type": "bedrock", "region": "us-east-1", "base_url": fake.base_url, "timeouts": TIMEOUTS,
                    "aws_access_key_id": "AKIDCACHE", "aws_secret_access_key": "cache-SECRET"},
        "vertex": {"type": "vertex", "project": PROJECT, "location": LOCATION, "base_url": fake.base_url,
                   "credentials_file": str(sa), "timeouts": TIMEOUTS},
    }
    models: list[dict[str, Any]] = []
    for name, model in MODELS.items():
        deployment = {"provider": name, "model": model, "price": PRICE}
        models.append({"name": name, "deployments": [deployment]})
        models.append({"name": f"{name}-auto", "deployments": [deployment], "prompt_cache": {"breakpoints": "auto"}})
    models.append({"name": "converse", "deployments": [{"provider": "bedrock", "model": "amazon.nova-pro-v1",
                                                         "price": PRICE}]})
    raw: dict[str, Any] = {"auth": {"allow_unauthenticated": True}, "providers": providers, "models": models}
    if store:
        raw["store"] = {"url": f"sqlite:///{tmp_path}/gateway.db", "ledger_journal": "off"}
    return raw


@pytest.fixture
def gw(claude: CachingClaudeUpstream, tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(parse_config(config(claude, tmp_path), env={}))


# --- the agents' conversations, in each client API's shape ---------------------------------------------------

def system_prompt(tag: str) -> str:
    return f"[{tag}] You are a coding agent. " + "Follow the repository's conventions. " * 160


TOOL_DESCRIPTION = "Run a shell command in the workspace and return its output. " * 30


def user_text(session: str, turn: int) -> str:
    return f"{session} turn {turn}: " + "please look at the next file and explain it. " * 4


Usage = tuple[int, int, int]  # (input tokens including cached ones, cache reads, cache writes), as the client saw


class Chat:
    """An OpenAI SDK chat client; `marked`: it sends `cache_control` parts itself."""

    def __init__(self, gw: GatewayServer) -> None:
        self.client = openai.OpenAI(base_url=gw.base_url, api_key="any", max_retries=0, timeout=30)

    def run(self, model: str, tag: str, session: str, turns: int, marked: bool) -> list[Usage]:
        system: Any = [{"type": "text", "text": system_prompt(tag), **({"cache_control": HOUR} if marked else {})}]
        tool: Any = {"type": "function", "function": {"name": "shell", "description": TOOL_DESCRIPTION,
                                                      "parameters": {"type": "object", "properties": {}}}}
        if marked:
            tool["cache_control"] = HOUR
        history: list[Any] = [{"role": "system", "content": system}]
        out: list[Usage] = []
        for turn in range(turns):
            history.append({"role": "user", "content": [{"type": "text", "text": user_text(session, turn)}]})
            sent = _mark_last_two(history, "user") if marked else history
            if turn % 2:
                r = self.client.chat.completions.create(model=model, messages=sent, tools=[tool])
                text, usage = r.choices[0].message.content, r.usage
            else:
                chunks = list(self.client.chat.completions.create(model=model, messages=sent, tools=[tool],
                                                                  stream=True, stream_options={"include_usage": True}))
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                usage = chunks[-1].usage
            assert usage is not None and usage.prompt_tokens_details is not None
            writes = getattr(usage.prompt_tokens_details, "cache_write_tokens", 0)
            out.append((usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0, writes))
            history.append({"role": "assistant", "content": text})
        return out


class Responses:
    """A Codex-shaped Responses client: instructions, a function tool, input items, `prompt_cache_key`."""

    def __init__(self, gw: GatewayServer) -> None:
        self.client = openai.OpenAI(base_url=gw.base_url, api_key="any", max_retries=0, timeout=30)

    def run(self, model: str, tag: str, session: str, turns: int, marked: bool) -> list[Usage]:
        tool: Any = {"type": "function", "name": "shell", "description": TOOL_DESCRIPTION, "strict": False,
                     "parameters": {"type": "object", "properties": {}}}
        items: list[Any] = []
        instructions: dict[str, Any] = {"instructions": system_prompt(tag)}
        if marked:  # the convention other gateways accept: cache_control on a content part
            tool["cache_control"] = HOUR
            instructions = {}
            items.append({"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": system_prompt(tag), "cache_control": HOUR}]})
        out: list[Usage] = []
        for turn in range(turns):
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": user_text(session, turn)}]})
            sent = _mark_last_two(items, "user", part_key="content") if marked else items
            kwargs: Any = {"model": model, "input": sent, "tools": [tool], "prompt_cache_key": session,
                           "store": False, **instructions}
            if turn % 2:
                final = self.client.responses.create(**kwargs)
            else:
                with self.client.responses.stream(**kwargs) as s:
                    final = s.get_final_response()
            u = final.usage
            assert u is not None
            details = u.input_tokens_details
            out.append((u.input_tokens, details.cached_tokens, details.cache_write_tokens))
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": final.output_text}]})
        return out


class Messages:
    """An Anthropic SDK client (Claude Code's shape: system blocks, tools, content blocks)."""

    def __init__(self, gw: GatewayServer) -> None:
        self.client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="any", max_retries=0,
                                          timeout=30)

    def run(self, model: str, tag: str, session: str, turns: int, marked: bool) -> list[Usage]:
        system: Any = [{"type": "text", "text": system_prompt(tag), **({"cache_control": HOUR} if marked else {})}]
        tool: Any = {"name": "shell", "description": TOOL_DESCRIPTION, "input_schema": {"type": "object"}}
        if marked:
            tool["cache_control"] = HOUR
        history: list[Any] = []
        out: list[Usage] = []
        for turn in range(turns):
            history.append({"role": "user", "content": [{"type": "text", "text": user_text(session, turn)}]})
            sent = _mark_last_two(history, "user") if marked else history
            kwargs: Any = {"model": model, "max_tokens": 256, "system": system, "tools": [tool], "messages": sent}
            if turn % 2:
                message = self.client.messages.create(**kwargs)
            else:
                with self.client.messages.stream(**kwargs) as s:
                    message = s.get_final_message()
            u = message.usage
            reads, writes = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
            out.append((u.input_tokens + reads + writes, reads, writes))
            history.append({"role": "assistant", "content": [{"type": "text", "text": message.content[0].text}]})
        return out


def _mark_last_two(turns: list[Any], role: str, part_key: str = "content") -> list[Any]:
    """The turns with `cache_control` on the last part of the last two `role` turns (Claude Code's habit)."""
    out = list(turns)
    marked = [i for i, t in enumerate(out) if t.get("role") == role][-2:]
    for i in marked:
        parts = list(out[i][part_key])
        parts[-1] = {**parts[-1], "cache_control": EPHEMERAL}
        out[i] = {**out[i], part_key: parts}
    return out


CLIENTS = {"chat": Chat, "responses": Responses, "messages": Messages}


def read_share(log: list[Served]) -> float:
    return sum(s.read for s in log) / sum(s.total for s in log)


def converse(client: Any, fake: CachingClaudeUpstream, model: str, tag: str, marked: bool) -> list[Served]:
    """An earlier session of the agent, then the measured 10-turn conversation: what the upstream served
    for it, checked against what the client was told."""
    client.run(model, tag, "earlier", 2, marked)
    start = len(fake.log)
    seen = client.run(model, tag, "measured", TURNS, marked)
    served = fake.log[start:]
    assert len(served) == TURNS
    assert [s.stream for s in served] == [turn % 2 == 0 for turn in range(TURNS)]
    for (total, reads, writes), s in zip(seen, served, strict=True):
        assert (total, reads, writes) == (s.total, s.read, s.write)
    return served


@pytest.mark.parametrize("provider", list(MODELS))
@pytest.mark.parametrize("api", list(CLIENTS))
def test_a_conversation_reads_its_prefix_from_the_cache(api: str, provider: str, claude: CachingClaudeUpstream,
                                                        gw: GatewayServer) -> None:
    client = CLIENTS[api](gw)
    shape = provider
    with_markers = converse(client, claude, provider, "markers", marked=True)
    auto = converse(client, claude, f"{provider}-auto", "auto", marked=False)
    neither = converse(client, claude, provider, "neither", marked=False)
    assert {s.shape for s in with_markers + auto + neither} == {shape}
    assert read_share(with_markers) >= 0.9, read_share(with_markers)
    assert read_share(auto) >= 0.9, read_share(auto)
    assert read_share(neither) == 0.0
    assert all(s.markers == [] for s in neither)
    # auto: the end of the tools, the end of the system prompt, the last block of the last two user turns
    last = auto[-1]
    user_turns = [2 * TURNS - 4, 2 * TURNS - 2]  # user, assistant, ... : the last two user turns
    assert last.markers == [("tools[0]", EPHEMERAL), ("system[0]", EPHEMERAL),
                            *((f"messages[{i}].content[0]", EPHEMERAL) for i in user_turns)]
    # the client's: its 1-hour tool and system markers, then its last two user turns', as Anthropic takes them
    assert with_markers[-1].markers == [("tools[0]", HOUR), ("system[0]", HOUR),
                                        *((f"messages[{i}].content[0]", EPHEMERAL) for i in user_turns)]


def test_markers_over_four_are_dropped_from_the_oldest_and_logged(claude: CachingClaudeUpstream,
                                                                   gw: GatewayServer) -> None:
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="any", max_retries=0, timeout=30)
    messages: list[Any] = [{"role": "user" if i % 2 == 0 else "assistant",
                            "content": [{"type": "text", "text": f"turn {i}", "cache_control": EPHEMERAL}]}
                           for i in range(5)]
    system: Any = [{"type": "text", "text": "rules", "cache_control": HOUR}]
    with capture_logs() as logs:
        client.messages.create(model="anthropic", max_tokens=16, system=system, messages=messages)
    served = claude.log[-1]  # not refused: the upstream counted at most four
    assert [path for path, _ in served.markers] == [f"messages[{i}].content[0]" for i in (1, 2, 3, 4)]
    line = next(e for e in logs if e.get("event") == "request")
    assert line["cache_markers_dropped"] == 2
    assert claude.sent[-1]["system"] == [{"type": "text", "text": "rules"}]


def test_markers_inside_a_tool_result_count_toward_the_four(claude: CachingClaudeUpstream,
                                                              gw: GatewayServer) -> None:
    """Claude Code marks the blocks inside its tool results: the gateway counts them with the others, so
    five markers are not Anthropic's 400, and `auto` adds none to a request whose only marker is one."""
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="any", max_retries=0, timeout=30)
    result: Any = {"type": "tool_result", "tool_use_id": "c1",
                   "content": [{"type": "text", "text": "a.txt b.txt", "cache_control": EPHEMERAL}]}
    call: Any = {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "shell", "input": {}}]}
    tool: Any = {"name": "shell", "description": "run", "input_schema": {"type": "object"}}
    messages: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "list the files", "cache_control": EPHEMERAL}]},
        call, {"role": "user", "content": [result, {"type": "text", "text": "and?", "cache_control": EPHEMERAL}]}]
    with capture_logs() as logs:
        client.messages.create(model="anthropic", max_tokens=16, tools=[{**tool, "cache_control": HOUR}],
                               system=[{"type": "text", "text": "rules", "cache_control": HOUR}], messages=messages)
    assert [path for path, _ in claude.log[-1].markers] == [  # the tools' marker, the oldest, dropped
        "system[0]", "messages[0].content[0]", "messages[2].content[0].content[0]", "messages[2].content[1]"]
    assert next(e for e in logs if e.get("event") == "request")["cache_markers_dropped"] == 1
    unmarked = [{"role": "user", "content": "list the files"}, call, {"role": "user", "content": [result]}]
    client.messages.create(model="anthropic-auto", max_tokens=16, tools=[tool], system="rules", messages=unmarked)
    assert [path for path, _ in claude.log[-1].markers] == ["messages[2].content[0].content[0]"]


@pytest.mark.parametrize("pad", [0, 100_000, 600_000])
def test_markers_spelled_with_escapes_are_fitted_too(claude: CachingClaudeUpstream, gw: GatewayServer,
                                                     pad: int) -> None:
    """A key written `cache\\u005fcontrol` is `cache_control` to every JSON reader: the check that spares
    unmarked bodies the markers' walk must not let six of them through, whether the body's depth is walked
    at once (a small body), a slice at a time (over 64 KiB), or past the container bound's count (over
    250,000 bytes): `pipeline/request.py`, `read_json`."""
    blocks = ",".join(f'{{"type": "text", "text": "b{i}{" pad" * (pad // 4) if i == 0 else ""}", '
                      '"cache\\u005fcontrol": {"type": "ephemeral"}}' for i in range(6))
    body = f'{{"model": "anthropic", "max_tokens": 8, "messages": [{{"role": "user", "content": [{blocks}]}}]}}'
    req = urllib.request.Request(f"http://127.0.0.1:{gw.port}/v1/messages", body.encode(),
                                 {"content-type": "application/json", "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    assert [path for path, _ in claude.log[-1].markers] == [f"messages[0].content[{j}]" for j in (2, 3, 4, 5)]


def test_a_fifth_marker_is_what_the_fake_refuses(claude: CachingClaudeUpstream, gw: GatewayServer) -> None:
    """The fake is strict where Anthropic is: without the gateway's limit, five markers are a 400."""
    blocks = [{"type": "text", "text": f"b{i}", "cache_control": EPHEMERAL} for i in range(5)]
    body = orjson.dumps({"model": "x", "max_tokens": 1, "messages": [{"role": "user", "content": blocks}]})
    req = urllib.request.Request(f"{claude.base_url}/v1/messages", body, {"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 400
    assert orjson.loads(info.value.read())["error"]["type"] == "invalid_request_error"


def test_bedrock_converse_gets_cache_points(claude: CachingClaudeUpstream, gw: GatewayServer) -> None:
    chat = Chat(gw)
    chat.run("converse", "converse", "earlier", 2, marked=True)
    start = len(claude.log)
    seen = chat.run("converse", "converse", "measured", TURNS, marked=True)
    served = claude.log[start:]
    assert {s.shape for s in served} == {"converse"}
    assert seen == [(s.total, s.read, s.write) for s in served]  # Converse's usage, streams and bodies
    assert read_share(served) >= 0.9
    body = claude.sent[-1]
    point = {"cachePoint": {"type": "default"}}
    assert body["toolConfig"]["tools"][1] == point and body["system"][1] == point
    marked = [i for i, m in enumerate(body["messages"]) if point in m["content"]]
    assert marked == [2 * TURNS - 4, 2 * TURNS - 2]
    assert all(m["content"][-1] == point for m in (body["messages"][i] for i in marked))


@pytest.mark.parametrize("api", list(CLIENTS))
def test_tokens_cost_and_ledger_price_cache_reads_and_writes(api: str, claude: CachingClaudeUpstream, tmp_path: Path,
                                                            make_gateway: Callable[..., GatewayServer]) -> None:
    """Every API prices Anthropic's writes as writes, the 1-hour ones at their own price, streamed or not:
    Responses too, whose usage object has no field for the 1-hour ones."""
    gw = make_gateway(parse_config(config(claude, tmp_path, store=True), env={}))
    CLIENTS[api](gw).run("anthropic", "priced", "one", 4, marked=True)
    served = claude.log
    reads, writes = sum(s.read for s in served), sum(s.write for s in served)
    hour = sum(s.write_1h for s in served)
    total = sum(s.total for s in served)
    assert reads and hour and writes > hour
    want = sum((s.uncached * PRICE["input"] + s.read * PRICE["cached_input"]
                + (s.write - s.write_1h) * PRICE["cache_write"] + s.write_1h * PRICE["cache_creation_input_1h"]
                + OUTPUT_TOKENS * PRICE["output"]) / 1e6 for s in served)
    labels = {"model": "anthropic"}
    assert gw.sample("llm_gateway_tokens_total", type="cached_input", **labels) == reads
    assert gw.sample("llm_gateway_tokens_total", type="cache_creation_input", **labels) == writes
    assert gw.sample("llm_gateway_tokens_total", type="input", **labels) == total
    assert gw.sample("llm_gateway_cost_usd_total", **labels) == pytest.approx(want, rel=1e-9)
    rows = _spend_rows(tmp_path / "gateway.db", len(served))
    assert sum(r[0] for r in rows) == reads and sum(r[1] for r in rows) == writes
    assert sum(r[2] for r in rows) == pytest.approx(want, rel=1e-9)


def _spend_rows(db: Path, count: int, deadline_s: float = 10.0) -> list[tuple[int, int, float]]:
    """The ledger's rows once all `count` are committed (group commit: polled, with a deadline)."""
    end = time.monotonic() + deadline_s
    while True:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            rows = conn.execute(
                "SELECT cached_input_tokens, cache_creation_input_tokens, cost_usd FROM gw_spend").fetchall()
        if len(rows) >= count or time.monotonic() > end:
            assert len(rows) == count
            return rows
        time.sleep(0.02)


# --- OpenAI's prompt_cache_key to OpenAI-type upstreams, learned once where it is refused -------------------

def test_prompt_cache_key_reaches_openai_type_upstreams_and_a_refusal_is_learned_once(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway()  # model `m` on an OpenAI-compatible server (tests/harness.py)
    client = openai.OpenAI(base_url=gw.base_url, api_key="any", max_retries=0, timeout=30)
    refusal = error_script(400, None, "Unrecognized request argument supplied: prompt_cache_key",
                           param="prompt_cache_key")
    upstream.enqueue(CHAT, completion("first"), refusal, completion("second"), completion("third"))
    ask: Any = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "session-1",
                "prompt_cache_retention": "24h"}
    assert client.chat.completions.create(**ask).choices[0].message.content == "first"
    with capture_logs() as logs:
        assert client.chat.completions.create(**ask).choices[0].message.content == "second"
    assert client.chat.completions.create(**ask).choices[0].message.content == "third"
    sent = upstream.bodies(CHAT)
    assert [(b.get("prompt_cache_key"), b.get("prompt_cache_retention")) for b in sent] == [
        ("session-1", "24h"), ("session-1", "24h"), (None, None), (None, None)]
    assert any(e.get("event") == "learned_upstream_fact" and e["fact"] == "no_prompt_cache_key" for e in logs)
    assert gw.sample("llm_gateway_learned_fallbacks", deployment="up/up-model", api="chat",
                     fact="no_prompt_cache_key") == 1


def test_a_refusal_for_another_reason_is_not_learned(upstream: FakeUpstream,
                                                     make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway()
    client = openai.OpenAI(base_url=gw.base_url, api_key="any", max_retries=0, timeout=30)
    upstream.enqueue(CHAT, error_script(400, None, "messages must not be empty", param="messages"))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                       prompt_cache_key="session-1")
    assert len(upstream.bodies(CHAT)) == 1
    assert gw.sample("llm_gateway_learned_fallbacks", fact="no_prompt_cache_key") == 0
