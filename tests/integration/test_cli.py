"""The CLI as users run it: real processes, real ports, the official openai SDK."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway import COMPILED, __version__
from tests.ports import free_port

GATEWAY = [sys.executable, "-m", "gateway"]
SECRET = "sk-live-THIS-MUST-NOT-BE-PRINTED-123456"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GATEWAY, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_version() -> None:
    assert run("version").stdout.strip() == __version__


BAD = f"""
server: {{port: 8080, metrics_port: 9464, bogus: 1}}
auth: {{allow_unauthenticated: true}}
providers:
  real: {{type: openai, base_url: https://api.openai.com/v1, api_key: {SECRET}}}
  other: {{type: openai, base_url: https://example.com/v1, api_key: "${{MISSING_KEY_VAR}}"}}
models:
  - name: a
    deployments: [{{provider: real, model: x}}]
  - name: b
    deployments: [{{provider: real, model: y}}]
  - name: c
    deployments: [{{provider: real, model: z}}, {{provider: x, model: q}}]
"""


def test_check_config_names_every_bad_key_path_and_never_a_secret(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(BAD)
    result = run("check-config", str(cfg))
    assert result.returncode == 2
    assert 'models[2].deployments[1].provider: unknown provider "x"' in result.stderr
    assert "server.bogus: unknown key" in result.stderr
    assert "providers.other.api_key: environment variable MISSING_KEY_VAR is not set" in result.stderr
    assert SECRET not in result.stderr + result.stdout
    served = run("serve", "--config", str(cfg))
    assert served.returncode == 2
    assert 'models[2].deployments[1].provider: unknown provider "x"' in served.stderr
    assert SECRET not in served.stderr + served.stdout


def test_check_config_accepts_a_valid_file_with_env(tmp_path: Path) -> None:
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(BAD.replace("bogus: 1", "drain_s: 5").replace(", {provider: x, model: q}", ""))
    assert run("check-config", str(cfg), env={"MISSING_KEY_VAR": "k"}).returncode == 0


EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "config" / "contract_example.yaml"
# what the example leaves out: the models its allowlists name (`fast`, `claude-*`), which the gateway
# requires to exist (docs/reference.md, "Config keys"), and the secrets of its `${VAR}`s
EXAMPLE_MODELS = """\
  - name: fast
    deployments: [{provider: demo, model: fast}]
  - name: claude-sonnet
    deployments: [{provider: claude, model: claude-sonnet-4-5}]
"""
EXAMPLE_ENV = {"TEAM_A_KEY": "gw-team-a-key-0001", "OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a",
               "AZURE_KEY": "az", "GEMINI_API_KEY": "g", "ADMIN_KEY": "gw-admin-key-0001",
               "ML_ADMIN_KEY": "gw-ml-admin-key-0001"}


def test_the_example_config_with_bare_on_off_is_valid(tmp_path: Path) -> None:
    """The documented example as written, bare `affinity: off`, `continuation: off` and
    `prompt_cache: {breakpoints: off}` included (docs/reference.md, "Config keys")."""
    text = EXAMPLE.read_text()
    assert "    affinity: off  " in text and text.count("\nguardrails:\n") == 1
    cfg = tmp_path / "example.yaml"
    cfg.write_text(text.replace("\nguardrails:\n", f"\n{EXAMPLE_MODELS}guardrails:\n"))
    result = run("check-config", str(cfg), env=EXAMPLE_ENV)
    assert result.returncode == 0, result.stderr
    assert "valid (3 models, 7 providers)" in result.stdout


def test_check_config_refuses_two_keys_with_one_secret_or_one_name(tmp_path: Path) -> None:
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    cfg = tmp_path / "dup.yaml"
    cfg.write_text(f"""
auth:
  keys:
    - {{name: team-a, key: {SECRET}, models: [a]}}
    - {{name: team-b, key: {SECRET}}}
    - {{name: team-c, key_sha256: {digest.upper()}}}
    - {{name: team-a, key: another-secret}}
providers: {{demo: {{type: mock}}}}
models: [{{name: a, deployments: [{{provider: demo, model: m}}]}}]
""")
    result = run("check-config", str(cfg))
    assert result.returncode == 2
    assert "auth.keys[1].key: the same secret as auth.keys[0]" in result.stderr
    assert "auth.keys[2].key_sha256: the same secret as auth.keys[0]" in result.stderr  # digest vs plain key
    assert 'auth.keys[3].name: duplicate key name "team-a" (also auth.keys[0])' in result.stderr
    assert SECRET not in result.stderr + result.stdout and digest not in result.stderr.lower()


@pytest.fixture
def demo() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """`gateway serve` with no config: the embedded default, on free ports."""
    port, mport = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_CONFIG"}
    proc = subprocess.Popen([*GATEWAY, "serve", "--port", str(port), "--metrics-port", str(mport)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if '"listening"' in line:
            break
    else:
        proc.kill()
        pytest.fail("gateway did not start: " + "".join(lines))
    assert any("demo_mode" in line for line in lines), "the demo logs a warning"
    # which build serves: `make test` runs this file on the compiled build (docs/compiled.md)
    assert f'"build":"{"compiled" if COMPILED else "pure-python"}"' in lines[-1], lines[-1]
    # the default max_connections is what the fd limit holds: a default start does not warn about it
    assert not any("max_connections_lowered" in line for line in lines), lines
    yield proc, port
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_embedded_default_streams_the_demo_model_and_drains_on_sigterm(
        demo: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = demo
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=20)
    assert [m.id for m in c.models.list()] == ["demo"]
    stream = c.chat.completions.create(model="demo", stream=True,
                                       messages=[{"role": "user", "content": "hi"}])
    it = iter(stream)
    first = next(it)
    assert first.choices
    proc.send_signal(signal.SIGTERM)  # drain: the open stream finishes, then the process exits 0
    rest = list(it)
    text = "".join(ch.choices[0].delta.content or "" for ch in [first, *rest] if ch.choices)
    assert text.startswith("Hello from the llm-gateway demo.") and text.endswith("in Grafana.")
    assert proc.wait(timeout=20) == 0


def test_embedded_default_serves_the_responses_api_too(demo: tuple[subprocess.Popen[str], int]) -> None:
    _, port = demo
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=20)
    with c.responses.stream(model="demo", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 5 and "".join(deltas) == final.output_text
    assert c.responses.create(model="demo", input="hi").output_text == final.output_text
    e = c.embeddings.create(model="demo", input=["a", "b"])
    assert len(e.data) == 2


def test_the_same_port_for_the_api_and_metrics_is_a_config_error_naming_both(tmp_path: Path) -> None:
    port = free_port()
    by_flags = run("serve", "--port", str(port), "--metrics-port", str(port),
                   env={"GATEWAY_CONFIG": ""})
    assert by_flags.returncode == 2
    assert by_flags.stderr.startswith(f"server.metrics_port: the same port as server.port ({port}): "), by_flags.stderr
    assert "cannot listen" not in by_flags.stderr
    path = tmp_path / "same.yaml"
    path.write_text(f"server: {{port: {port}, metrics_port: {port}}}\nauth: {{allow_unauthenticated: true}}\n"
                    "providers: {d: {type: mock}}\nmodels: [{name: m, deployments: [{provider: d, model: x}]}]\n")
    checked = run("check-config", str(path))
    assert checked.returncode == 2 and "server.metrics_port: the same port as server.port" in checked.stderr
    assert "--metrics-port" in checked.stderr


def test_an_explicit_max_connections_over_the_fd_limit_still_warns(tmp_path: Path) -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard > 1 << 24:
        pytest.skip("no finite fd limit to exceed")
    port, mport = free_port(), free_port()
    path = tmp_path / "many.yaml"
    path.write_text(f"server: {{port: {port}, metrics_port: {mport}, max_connections: {hard}}}\n"
                    "auth: {allow_unauthenticated: true}\n"
                    "providers: {d: {type: mock}}\nmodels: [{name: m, deployments: [{provider: d, model: x}]}]\n")
    proc = subprocess.Popen([*GATEWAY, "serve", "--config", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if '"listening"' in line:
                break
    finally:
        proc.kill()
        proc.wait()
    assert any('"max_connections_lowered"' in line and f'"configured":{hard}' in line for line in lines), lines
