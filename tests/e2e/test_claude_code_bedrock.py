"""Claude Code headless (`claude -p`) through the gateway to Claude on Bedrock (scripted, offline): the
scripted Bedrock verifies each request's SigV4 signature and answers event-stream frames. Claude Code's
Messages requests reach InvokeModel natively (its betas in the body); an in-stream `throttlingException`
before any text falls back to the second deployment, and Claude Code never sees it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.e2e.test_claude_code import MODEL, claude
from tests.eventstream_frames import chunk, exception
from tests.fake_aws import EVENTSTREAM, FakeBedrock, KeyPair
from tests.fake_upstream import Script
from tests.harness import GatewayServer, LoopThread

GW_KEY = "gw-claude-code-key-0001"  # what tests.e2e.test_claude_code.claude sends
KEY_ID, SECRET = "AKIACLAUDECODE", "bedrock-secret-for-claude-code"
PRIMARY, FALLBACK = "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
TIMEOUTS = {"connect_s": 2, "first_token_s": 20, "idle_s": 20, "total_s": 60}


def path(model: str) -> str:
    return f"/model/{model}/invoke-with-response-stream"


def answer(pieces: list[str], mid: str = "msg_bdrk") -> Script:
    events = [a.message_start(mid), *a.text_block(0, pieces), a.message_delta("end_turn", {"output_tokens": 5}),
              a.message_stop()]
    return Script([b"".join(chunk(e) for e in events)], headers=EVENTSTREAM, split=11)


@pytest.fixture
def bedrock(servers: LoopThread) -> Iterator[FakeBedrock]:
    fake = FakeBedrock({KEY_ID: KeyPair(SECRET)})
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


def gateway(make_gateway: Callable[..., GatewayServer], fake: FakeBedrock) -> GatewayServer:
    creds = {"type": "bedrock", "region": "us-east-1", "base_url": fake.base_url, "timeouts": TIMEOUTS,
             "aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "claude-code", "key": GW_KEY}]},
        "providers": {"bedrock-us": creds, "bedrock-eu": creds},
        "models": [{"name": MODEL, "deployments": [{"provider": "bedrock-us", "model": PRIMARY},
                                                   {"provider": "bedrock-eu", "model": FALLBACK}],
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}}],
    }, env={}))


def test_claude_code_through_bedrock(bedrock: FakeBedrock, tmp_path: Path,
                                     make_gateway: Callable[..., GatewayServer]) -> None:
    gw = gateway(make_gateway, bedrock)
    bedrock.defaults[path(PRIMARY)] = answer(["Hello from ", "Claude on Bedrock."])
    result = claude(gw, "Say hello", tmp_path)
    assert result["is_error"] is False and result["result"] == "Hello from Claude on Bedrock."
    got = [r for r in bedrock.received if r.path == path(PRIMARY)]
    assert got and bedrock.rejected == [] and set(bedrock.key_ids) == {KEY_ID}
    body = got[0].body
    assert body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in body and "stream" not in body
    assert "claude-code-20250219" in body["anthropic_beta"]
    assert {"system", "tools", "messages"} <= set(body)
    assert GW_KEY not in str(got[0].headers)


def test_throttling_before_any_text_is_invisible_to_claude_code(bedrock: FakeBedrock, tmp_path: Path,
                                                                make_gateway: Callable[..., GatewayServer]) -> None:
    gw = gateway(make_gateway, bedrock)
    throttled = chunk(a.message_start("msg_throttled")) + exception("throttlingException", "Too many requests")
    bedrock.enqueue(path(PRIMARY), Script([throttled], headers=EVENTSTREAM))
    bedrock.defaults[path(PRIMARY)] = answer(["unused"])
    bedrock.defaults[path(FALLBACK)] = answer(["The fallback ", "answers."])
    result = claude(gw, "Say hello", tmp_path)
    assert result["is_error"] is False and result["result"] == "The fallback answers."
    assert [r.path for r in bedrock.received][:2] == [path(PRIMARY), path(FALLBACK)]
    assert gw.sample("llm_gateway_upstream_attempts_total", model=MODEL, deployment=f"bedrock-us/{PRIMARY}",
                     outcome="inband_error") == 1

