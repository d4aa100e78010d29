"""Codex CLI (tests/e2e/test_codex.py runs it the same way) through the Responses bridge to a scripted
Anthropic upstream that keeps a prompt cache (`tests/anthropic_cache_upstream.py`), with
`prompt_cache: {breakpoints: auto}` on the model (docs/caching.md): Codex sends no cache markers, so the
gateway adds them, and from the second turn on each turn reads the prefix the one before it wrote."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.anthropic_cache_upstream import CachingClaudeUpstream
from tests.e2e.test_codex import GW_KEY, MODEL, TIMEOUTS, codex, write_config
from tests.harness import GatewayServer, LoopThread

EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def claude(servers: LoopThread) -> Iterator[CachingClaudeUpstream]:
    fake = CachingClaudeUpstream()
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


def shell_call(n: int, command: str) -> tuple[list[dict[str, object]], str]:
    return a.tool_block(0, f"toolu_{n}", "exec_command", [orjson.dumps({"cmd": command}).decode()]), "tool_use"


def test_codex_reads_the_cache_from_its_second_turn_on(claude: CachingClaudeUpstream, tmp_path: Path,
                                                       make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(parse_config({
        "auth": {"keys": [{"name": "codex", "key": GW_KEY}]},
        "providers": {"claude": {"type": "anthropic", "base_url": claude.base_url, "api_key": "sk-ant-SECRET",
                                 "timeouts": TIMEOUTS}},
        "models": [{"name": MODEL, "prompt_cache": {"breakpoints": "auto"},
                    "deployments": [{"provider": "claude", "model": "claude-sonnet-4-5"}]}],
    }, env={}))
    claude.replies.extend([shell_call(1, "echo first-$((2*3))"), shell_call(2, "echo second-$((3*3))"),
                           (a.text_block(0, ["Both commands ran."]), "end_turn")])
    write_config(tmp_path / "codex", gw.base_url)
    done = codex(tmp_path / "codex", tmp_path, "Run two echo commands, one after the other.")
    assert "Both commands ran." in done.stdout
    turns = [s for s in claude.log if s.shape == "anthropic"]
    assert len(turns) >= 3, turns
    first, second, third = turns[:3]
    # each turn reads all of the turn before (its last user turn was marked), and writes what it adds
    assert (first.read, first.write) == (0, first.total)
    assert (second.read, third.read) == (first.total, second.total)
    for i, s in enumerate(turns[:3]):  # the gateway's: end of tools, end of system, the last two user turns
        body = claude.sent[i]
        users = [j for j, m in enumerate(body["messages"]) if m["role"] == "user"][-2:]
        assert s.markers == [(f"tools[{len(body['tools']) - 1}]", EPHEMERAL),
                             (f"system[{len(body['system']) - 1}]", EPHEMERAL),
                             *((f"messages[{j}].content[{len(body['messages'][j]['content']) - 1}]", EPHEMERAL)
                               for j in users)]
    assert "first-6" in orjson.dumps(claude.sent[2]["messages"]).decode(), "Codex ran the commands"
