"""Claude Code's `--resume` through the gateway (docs/agents.md, "Names the gateway gave back"): a session's
transcript records the `model` its answers carried, which is the deployment's upstream model name
(configured, or a snapshot name the upstream reported), not a name of the gateway's model, and a resumed
session names its model by it. Headless and offline: `claude -p` with Claude Code's own default model names
(reaching the models through their aliases), then `claude -p --resume <session id> --model <the model its
transcript recorded>`. In these runs the pinned Claude Code (2.1.328) resumed with its default name, both
headless and interactive (a pty), so the test hands it the recorded name, as a client that restores the
session's model (or a user copying it from the transcript) does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import MODEL as CHAT_REPORTED
from tests.chat_scripts import text_stream
from tests.e2e.test_claude_code import GW_KEY, OPENAI_PATH, TIMEOUTS, UP_KEY, claude
from tests.fake_upstream import FakeUpstream, Script
from tests.harness import GatewayServer

CONFIGURED = "us.anthropic.main-dep-v1:0"  # a Bedrock-style id: no alias of the model matches it
SNAPSHOT = "main-dep-20260101"  # what an upstream may report for the configured `main-dep`


def anthropic_answer(reported: str, pieces: list[str]) -> Script:
    return a.stream([a.message_start("msg_resume", model=reported), a.ping(), *a.text_block(0, pieces),
                     a.message_delta(), a.message_stop()])


def recorded_model(home: Path, session_id: str) -> str:
    """The model the session's transcript recorded for its last answer."""
    transcript = next(home.glob(f".claude/projects/*/{session_id}.jsonl"))
    entries = [orjson.loads(line) for line in transcript.read_bytes().splitlines() if line.strip()]
    models = [e["message"]["model"] for e in entries if e.get("type") == "assistant"]
    assert models, f"no answer in the transcript {transcript}"
    return str(models[-1])


def gateway(make_gateway: Callable[..., GatewayServer], up: FakeUpstream, provider: str, dep: str) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "claude-code", "key": GW_KEY}]},
        "providers": {
            "claude": {"type": "anthropic", "base_url": up.base_url, "api_key": UP_KEY, "timeouts": TIMEOUTS},
            "oai": {"type": "openai", "base_url": f"{up.base_url}/v1", "api_key": "sk-oai-upstream-SECRET",
                    "timeouts": TIMEOUTS},
        },
        "models": [{"name": "main", "aliases": ["claude-opus-*", "claude-sonnet-*"],
                    "deployments": [{"provider": provider, "model": dep}]},
                   {"name": "fast", "aliases": ["claude-haiku-*", "claude-3-5-haiku-*"],
                    "deployments": [{"provider": provider, "model": dep}]}],
    }, env={}))


CASES = {  # deployment (provider, configured model), the upstream's answer, the name the answers carry
    "anthropic-configured-name": (("claude", CONFIGURED), lambda p: anthropic_answer(CONFIGURED, p), CONFIGURED),
    "anthropic-reported-snapshot": (("claude", "main-dep"), lambda p: anthropic_answer(SNAPSHOT, p), SNAPSHOT),
    "openai-reported-snapshot": (("oai", "oai-main-dep"), text_stream, CHAT_REPORTED),
}


@pytest.mark.parametrize("case", CASES)
def test_claude_code_resumes_a_session_served_under_the_deployments_own_name(
        case: str, upstream: FakeUpstream, tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    (provider, dep), answer, reported = CASES[case]
    gw = gateway(make_gateway, upstream, provider, dep)
    path = a.PATH if provider == "claude" else OPENAI_PATH
    upstream.defaults[path] = answer(["Hello, ", "first run."])
    first = claude(gw, "Say hello", tmp_path, pinned=False)
    assert first["is_error"] is False and first["result"] == "Hello, first run."
    assert recorded_model(tmp_path, first["session_id"]) == reported
    upstream.defaults[path] = answer(["Resumed ", "fine."])
    with capture_logs() as logs:
        resumed: dict[str, Any] = claude(gw, "Say it again", tmp_path, pinned=False,
                                         args=("--resume", first["session_id"], "--model", reported))
    assert resumed["is_error"] is False and resumed["result"] == "Resumed fine.", resumed
    lines = [e for e in logs if e["event"] == "request" and e["api"] == "messages"]
    assert lines and all(e["status"] == 200 for e in lines), lines
    # the resumed session sent the name the answers carried, and it was served and logged as the model
    assert [(e["requested_model"], e["model"]) for e in lines] == [(reported, "main")]
    assert {r.body["model"] for r in upstream.received if r.path == path} == {dep}
