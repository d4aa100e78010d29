"""GET /admin/v1/stats: this replica's last hour per model, from requests the official SDK made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway.config import parse_config
from tests.chat_scripts import completion, error_script, text_stream
from tests.control_plane import CONFIG_KEY, admin_call, raw_config
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread

MODEL = "stats-model"  # names of this test only: the window is the process's
BODY_MODEL = "stats-model-body"
FAILING_MODEL = "stats-model-failing"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def gateway(servers: LoopThread, upstream: FakeUpstream, tmp_path: Path) -> Iterator[GatewayServer]:
    raw = raw_config(f"sqlite:///{tmp_path}/gateway.db")
    raw["providers"] = {"up": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-up"}}
    raw["models"] = [{"name": m, "deployments": [{"provider": "up", "model": "x"}]}
                     for m in (MODEL, BODY_MODEL, FAILING_MODEL)]
    gw = GatewayServer(parse_config(raw, env={}))
    servers.run(gw.start())
    yield gw
    servers.run(gw.stop())


def test_stats_count_requests_errors_and_first_tokens(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CONFIG_KEY, max_retries=0)
    upstream.defaults["/v1/chat/completions"] = text_stream(["a", "b"])
    for _ in range(3):
        list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True))
    upstream.defaults["/v1/chat/completions"] = error_script(500, "server_error")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    status, body = admin_call(gateway.port, "GET", "stats?window_s=600")
    assert status == 200 and body["window_s"] == 600
    [row] = [r for r in body["data"] if r["model"] == MODEL]
    assert (row["requests"], row["errors"], row["error_rate"]) == (4, 1, 0.25)
    assert 0 < row["ttft_p50_s"] <= row["ttft_p95_s"] < 10
    # the gateway's own share of each first token (docs/overhead.md): a part of it
    assert 0 < row["overhead_p50_s"] <= row["ttft_p50_s"]


def test_stats_answer_the_overhead_of_whole_answers(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CONFIG_KEY, max_retries=0)
    upstream.defaults["/v1/chat/completions"] = completion("Hello")
    for _ in range(2):
        assert client.chat.completions.create(model=BODY_MODEL, messages=USER).choices[0].message.content == "Hello"
    upstream.defaults["/v1/chat/completions"] = error_script(500, "server_error")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model=FAILING_MODEL, messages=USER)
    status, body = admin_call(gateway.port, "GET", "stats?window_s=600")
    rows = {r["model"]: r for r in body["data"]}
    assert status == 200 and rows[BODY_MODEL]["ttft_p50_s"] is None  # no streamed first token
    assert 0 < rows[BODY_MODEL]["overhead_p50_s"] < 10
    assert (rows[FAILING_MODEL]["requests"], rows[FAILING_MODEL]["overhead_p50_s"]) == (1, None)  # none measured


@pytest.mark.parametrize("window", ["5", "3601", "abc", "-60", "", "%C2%B2", "9" * 5000])
def test_a_bad_window_is_a_400_naming_it(gateway: GatewayServer, window: str) -> None:
    status, body = admin_call(gateway.port, "GET", f"stats?window_s={window}")
    assert status == 400 and body["error"]["param"] == "window_s"


def test_stats_need_an_admin_credential(gateway: GatewayServer) -> None:
    assert admin_call(gateway.port, "GET", "stats", key=CONFIG_KEY)[0] == 401
