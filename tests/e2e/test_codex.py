"""Codex CLI itself (npm `@openai/codex`, installed by scripts/e2e-deps.sh) through the gateway's Responses
bridge (CONTRACT §10), headless (`codex exec`), offline: a temporary CODEX_HOME whose config.toml names the
gateway as a custom model provider (`wire_api = "responses"`, the gateway key in an environment variable).

Codex speaks only the Responses API; the deployments here have none: a scripted OpenAI-compatible
chat-only server (`responses: false`) and a scripted Anthropic upstream, where a run makes a shell tool
call, Codex runs the command and sends its output back, and the model's last answer is printed; and the
real llama.cpp server (chat only), whose answer Codex prints."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import chunk, text_stream, usage_chunk
from tests.e2e import processes
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, stream_script

CODEX = Path(__file__).parent / "node" / "node_modules" / ".bin" / "codex"
GW_KEY = "gw-codex-key-0001"
MODEL = "codex-model"
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
TIMEOUTS = {"connect_s": 2, "first_token_s": 20, "idle_s": 20, "total_s": 60}
RUN_TIMEOUT_S = 180
COMMAND = "echo bridged-$((6*7))"  # its output, bridged-42, is not in the command: Codex ran it
ANSWER = "The command printed bridged-42."


def write_config(home: Path, base_url: str, extra: str = "", provider_extra: str = "") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"""\
model = "{MODEL}"
model_provider = "gateway"
check_for_update_on_startup = false
{extra}
[model_providers.gateway]
name = "LLM gateway"
base_url = "{base_url}"
env_key = "GATEWAY_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
{provider_extra}
""")


def run_codex(home: Path, workdir: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    """One headless run, bounded, with no sandbox (the test's own temporary directory is its workdir).
    Its stdout is the last answer; its stderr the transcript."""
    assert CODEX.exists(), "run `make e2e-deps` (scripts/e2e-deps.sh installs Codex)"
    env = {"PATH": os.environ["PATH"], "HOME": str(home.parent), "CODEX_HOME": str(home),
           "GATEWAY_API_KEY": GW_KEY, "RUST_LOG": "error"}
    return subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "--color", "never",
                           "--dangerously-bypass-approvals-and-sandbox", prompt], env=env, cwd=workdir,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)


def codex(home: Path, workdir: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    done = run_codex(home, workdir, prompt)
    assert done.returncode == 0, f"codex failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def scripted_gateway(make_gateway: Callable[..., GatewayServer], up: FakeUpstream, provider: dict[str, Any]
                     ) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "codex", "key": GW_KEY}]},
        "providers": {"up": {**provider, "api_key": "sk-upstream-SECRET", "timeouts": TIMEOUTS}},
        "models": [{"name": MODEL, "deployments": [{"provider": "up", "model": "up-dep"}]}],
    }, env={}))


def chat_tool_call() -> Script:
    call = {"index": 0, "id": "call_sh1", "type": "function",
            "function": {"name": "exec_command", "arguments": orjson.dumps({"cmd": COMMAND}).decode()}}
    parts = [chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "Run it."}),
             chunk({"tool_calls": [call]}), chunk({}, "tool_calls"), usage_chunk()]
    return Script([*(sse(p) for p in parts), b"data: [DONE]\n\n"])


def test_codex_runs_a_shell_tool_through_a_chat_only_server(upstream: FakeUpstream, tmp_path: Path,
                                                            make_gateway: Callable[..., GatewayServer]) -> None:
    gw = scripted_gateway(make_gateway, upstream, {"type": "openai", "base_url": f"{upstream.base_url}/v1",
                                                   "responses": False})
    upstream.enqueue(CHAT_PATH, chat_tool_call(), text_stream([ANSWER]))
    upstream.defaults[CHAT_PATH] = text_stream(["(nothing more)"])
    write_config(tmp_path / "codex", f"{gw.base_url}")
    done = codex(tmp_path / "codex", tmp_path, "Run the echo command.")
    assert ANSWER in done.stdout
    bodies = upstream.bodies(CHAT_PATH)
    assert upstream.bodies("/v1/responses") == [], "never asked for a Responses API it has not"
    first, second = bodies[0], bodies[1]
    assert "exec_command" in [t["function"]["name"] for t in first["tools"]]
    call, result = second["messages"][-2:]
    assert call["role"] == "assistant" and call["tool_calls"][0]["id"] == "call_sh1"
    assert result["role"] == "tool" and result["tool_call_id"] == "call_sh1" and "bridged-42" in result["content"]


def test_codex_runs_a_shell_tool_through_anthropic(upstream: FakeUpstream, tmp_path: Path,
                                                   make_gateway: Callable[..., GatewayServer]) -> None:
    gw = scripted_gateway(make_gateway, upstream, {"type": "anthropic", "base_url": upstream.base_url})
    tool = a.tool_block(0, "toolu_sh1", "exec_command", [orjson.dumps({"cmd": COMMAND}).decode()])
    upstream.enqueue(a.PATH, a.stream([a.message_start("msg_1"), *tool, a.message_delta("tool_use"), a.message_stop()]),
                     a.text_stream([ANSWER], mid="msg_2"))
    upstream.defaults[a.PATH] = a.text_stream(["(nothing more)"], mid="msg_3")
    write_config(tmp_path / "codex", f"{gw.base_url}")
    done = codex(tmp_path / "codex", tmp_path, "Run the echo command.")
    assert ANSWER in done.stdout
    second = upstream.bodies(a.PATH)[1]
    use, result = second["messages"][-2]["content"][-1], second["messages"][-1]["content"][0]
    assert (use["type"], use["id"], use["input"]) == ("tool_use", "toolu_sh1", {"cmd": COMMAND})
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_sh1"
    assert "bridged-42" in orjson.dumps(result["content"]).decode()


# -- the real model server ------------------------------------------------------------------------------

# Gemma 3 270M writes no `<end_of_turn>` (its turn never ends by itself, and Codex sends no output limit),
# and llama-cpp-python's stream breaks when the context runs out. So this server takes the newline token as
# the end of the sequence: the answer is the model's first line, and the stream ends with a clean `stop`.
# Codex's prompt, with short instructions, is ~160 tokens in the server's gemma format (which drops system
# messages and tools).
LLAMA_OPTIONS = ("--n_ctx", "1024", "--n_batch", "256", "--n_ubatch", "256",
                 "--kv_overrides", "tokenizer.ggml.eos_token_id=int:107")  # 107: "\n" in Gemma 3's vocabulary


@pytest.fixture(scope="module")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, processes.Process]]:
    """Its own llama.cpp server, and a gateway process in front of it that knows the server has no Responses
    API: the gateway's /v1 and its process (for its log lines)."""
    llama, llama_url = processes.llama_server(*LLAMA_OPTIONS)
    llama.start(deadline_s=110)
    config = tmp_path_factory.mktemp("codex") / "gateway.yaml"
    config.write_text(f"""\
server: {{host: 127.0.0.1}}
auth: {{keys: [{{name: codex, key: "{GW_KEY}"}}]}}
providers:
  llama-chat:
    type: openai
    base_url: {llama_url}
    responses: false
    timeouts: {{connect_s: 5, first_token_s: 120, idle_s: 60, total_s: 170}}
models:
  - name: {MODEL}
    deployments: [{{provider: llama-chat, model: {processes.LLAMA_MODEL_ALIAS}}}]
""")
    gw, gateway_url, _metrics = processes.gateway(config, {})
    try:
        gw.start(deadline_s=30)
        yield gateway_url, gw
    finally:
        gw.stop()
        llama.stop()


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_codex_prints_the_real_models_answer_through_the_bridge(real_stack: tuple[str, processes.Process],
                                                                tmp_path: Path, transport: str) -> None:
    url, gw = real_stack
    home = tmp_path / "codex"
    # short instructions, so the small model's context holds the prompt (Codex's own are ~17k characters)
    (tmp_path / "instructions.md").write_text("You are a helpful assistant. Answer in one short sentence.\n")
    write_config(home, url, f'model_instructions_file = "{tmp_path / "instructions.md"}"',
                 provider_extra="supports_websockets = true" if transport == "websocket" else "")
    lines_before = len(gw.lines)
    done = codex(home, tmp_path, "What is the capital of France?")
    answer = done.stdout.strip()
    assert answer, f"Codex printed no answer:\n{done.stderr}"
    # each line compared without its edge whitespace: Codex prints the model's text as it came (the small
    # model may begin with spaces), its stdout here is stripped
    def lines(text: str) -> str:
        return "\n".join(line.strip() for line in text.splitlines())

    assert f"\ncodex\n{lines(answer)}\n" in lines(done.stderr) + "\n", "the transcript's last answer is the one printed"
    served = [orjson.loads(line) for line in gw.lines[lines_before:] if '"event":"request"' in line]
    assert any(r["api"] == "responses" and r["deployment"] == f"llama-chat/{processes.LLAMA_MODEL_ALIAS}"
               and r["status"] == 200 and r["outcome"] == "ok" and r["output_tokens"] > 0 for r in served), served
    assert all(r["transport"] == transport for r in served if r["api"] == "responses"), served


# -- WebSocket mode (Codex's default transport with a provider that supports it) ---------------------------

def test_codex_over_a_websocket_runs_a_shell_tool_through_anthropic(upstream: FakeUpstream, tmp_path: Path,
                                                                    make_gateway: Callable[..., GatewayServer]
                                                                    ) -> None:
    """`supports_websockets = true`: Codex opens one WebSocket (`GET /v1/responses`), warms it up, sends each
    turn's new items with `previous_response_id`; the gateway serves every turn through the bridge with the
    whole conversation, and Codex never falls back to an HTTP `POST /v1/responses`."""
    gw = scripted_gateway(make_gateway, upstream, {"type": "anthropic", "base_url": upstream.base_url})
    tool = a.tool_block(0, "toolu_sh1", "exec_command", [orjson.dumps({"cmd": COMMAND}).decode()])
    upstream.enqueue(a.PATH, a.stream([a.message_start("msg_1"), *tool, a.message_delta("tool_use"), a.message_stop()]),
                     a.text_stream([ANSWER], mid="msg_2"))
    upstream.defaults[a.PATH] = a.text_stream(["(nothing more)"], mid="msg_3")
    write_config(tmp_path / "codex", f"{gw.base_url}", provider_extra="supports_websockets = true")
    with capture_logs() as logs:
        done = codex(tmp_path / "codex", tmp_path, "Run the echo command.")
    assert ANSWER in done.stdout
    served = [e for e in logs if e["event"] == "request" and e["api"] == "responses"]
    assert served and all(e["transport"] == "websocket" for e in served), served  # no HTTP fallback
    sockets = [e for e in logs if e["event"] == "websocket_closed"]
    assert len(sockets) == 1 and sockets[0]["responses"] >= 2, sockets
    assert sockets[0]["continued"] >= 1, "Codex sent a turn's new items only, naming the previous response"
    second = upstream.bodies(a.PATH)[1]
    assert second["messages"][0]["role"] == "user"  # the whole conversation, from its first turn
    use, result = second["messages"][-2]["content"][-1], second["messages"][-1]["content"][0]
    assert (use["type"], use["id"], use["input"]) == ("tool_use", "toolu_sh1", {"cmd": COMMAND})
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_sh1"
    assert "bridged-42" in orjson.dumps(result["content"]).decode()


def test_codex_over_a_websocket_through_an_openai_responses_upstream(upstream: FakeUpstream, tmp_path: Path,
                                                                     make_gateway: Callable[..., GatewayServer]
                                                                     ) -> None:
    """Pass-through to an OpenAI Responses upstream: the gateway serves each socket turn over HTTP with the
    whole input (no `previous_response_id` reaches the upstream), so every backend is served alike."""
    gw = scripted_gateway(make_gateway, upstream, {"type": "openai", "base_url": f"{upstream.base_url}/v1"})
    call = Answer(rid="resp_up1").function_call("exec_command", "call_sh1", [orjson.dumps({"cmd": COMMAND}).decode()])
    upstream.enqueue(RESPONSES_PATH, stream_script(call.stream_events()),
                     stream_script(Answer(rid="resp_up2").message([ANSWER]).stream_events()))
    more = Answer(rid="resp_up3").message(["(nothing more)"])
    upstream.defaults[RESPONSES_PATH] = stream_script(more.stream_events())
    write_config(tmp_path / "codex", f"{gw.base_url}", provider_extra="supports_websockets = true")
    with capture_logs() as logs:
        done = codex(tmp_path / "codex", tmp_path, "Run the echo command.")
    assert ANSWER in done.stdout
    served = [e for e in logs if e["event"] == "request" and e["api"] == "responses"]
    assert served and all(e["transport"] == "websocket" for e in served), served
    (closed,) = [e for e in logs if e["event"] == "websocket_closed"]
    assert closed["responses"] >= 2 and closed["continued"] >= 1
    bodies = upstream.bodies(RESPONSES_PATH)
    assert all("previous_response_id" not in b for b in bodies)
    outputs = [i for i in bodies[1]["input"] if i.get("type") == "function_call_output"]
    assert outputs and outputs[0]["call_id"] == "call_sh1" and "bridged-42" in orjson.dumps(outputs[0]).decode()
    assert any(i.get("type") == "function_call" and i.get("call_id") == "call_sh1" for i in bodies[1]["input"])
