"""A cloud provider whose extra is not installed (docs/cloud-providers.md, "Extras"): `serve` says which
extra to install in one line and exits 1, instead of serving a config whose every request is a 502
`upstream_auth`; `check-config` finds the file valid (exit 0) and warns in the same words. Run as users
run them, in a subprocess whose Python cannot import botocore or google-auth (a `sitecustomize` on its
PYTHONPATH blocks the import: the environment of a venv without the extra). And a deployment with no
credentials at request time: the log line names the deployment and where its credentials come from; the
client learns neither."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import openai
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.e2e.processes import Process
from tests.harness import GatewayServer
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = {"aws": ("botocore",), "gcp": ("google.auth", "google.oauth2")}
CONFIG = """\
auth: {{keys: [{{name: k, key: gw-extras-key-0001}}]}}
providers:
{providers}
models:
  - name: m
    deployments: [{deployments}]
"""
BEDROCK = ("  bedrock-us: {type: bedrock, region: us-east-1}", "{provider: bedrock-us, model: amazon.nova-pro-v1:0}")
MOCK = ("  demo: {type: mock}", "{provider: demo, model: demo-1}")
VERTEX = ("  vertex-eu: {type: vertex, project: p, location: europe-west1}",
          "{provider: vertex-eu, model: gemini-2.5-pro}")


def write_config(tmp_path: Path, *providers: tuple[str, str]) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG.format(providers="\n".join(p for p, _ in providers),
                                  deployments=", ".join(d for _, d in providers)))
    return path


def blocked_env(tmp_path: Path, blocked: tuple[str, ...]) -> dict[str, str]:
    """The environment of a Python that cannot import the extras in `blocked`, and no cloud credentials."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    modules = [m for extra in blocked for m in BLOCKS[extra]]
    (site / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None  # `import {m}` raises ImportError\n" for m in modules))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "GATEWAY_"))}
    env.update(PYTHONPATH=f"{site}{os.pathsep}{ROOT}", AWS_EC2_METADATA_DISABLED="true", HOME=str(tmp_path),
               GCE_METADATA_HOST="127.0.0.1:9", GCE_METADATA_IP="127.0.0.1:9")
    return env


def gateway(tmp_path: Path, blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m gateway <args>` with the extras in `blocked` not importable."""
    env = blocked_env(tmp_path, blocked)
    return subprocess.run([sys.executable, "-m", "gateway", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_check_config_finds_the_config_valid_and_warns_of_the_missing_aws_extra(tmp_path: Path) -> None:
    done = gateway(tmp_path, ("aws",), "check-config", str(write_config(tmp_path, BEDROCK)))
    assert done.returncode == 0 and "valid (1 models, 1 providers)" in done.stdout, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("gateway: warning: ") and '"bedrock-us" (bedrock)' in line and "botocore" in line
    assert line.endswith("serve refuses to start until it is installed")
    assert "pip install 'llm-gateway[aws]'" in line and "make run EXTRAS=aws" in line


def test_check_config_names_both_extras_when_both_are_missing(tmp_path: Path) -> None:
    done = gateway(tmp_path, ("aws", "gcp"), "check-config", str(write_config(tmp_path, BEDROCK, VERTEX)))
    assert done.returncode == 0 and "valid" in done.stdout, done.stderr
    line = one_line(done.stderr)
    assert '"vertex-eu" (vertex)' in line and "google-auth" in line and "llm-gateway[aws,gcp]" in line


def test_only_the_missing_extra_is_named(tmp_path: Path) -> None:
    done = gateway(tmp_path, ("gcp",), "check-config", str(write_config(tmp_path, BEDROCK, VERTEX)))
    assert done.returncode == 0 and "valid" in done.stdout, done.stderr
    line = one_line(done.stderr)
    assert "llm-gateway[gcp]" in line and "bedrock" not in line


def test_with_the_extras_installed_the_config_is_valid(tmp_path: Path) -> None:
    done = gateway(tmp_path, (), "check-config", str(write_config(tmp_path, BEDROCK, VERTEX)))
    assert done.returncode == 0 and "valid" in done.stdout and done.stderr == "", done.stderr


def test_serve_refuses_to_start_without_the_extra(tmp_path: Path) -> None:
    port, metrics = free_port(), free_port()
    done = gateway(tmp_path, ("aws",), "serve", "--config", str(write_config(tmp_path, BEDROCK)),
                   "--port", str(port), "--metrics-port", str(metrics))
    assert done.returncode == 1 and done.stdout == ""
    assert "pip install 'llm-gateway[aws]'" in one_line(done.stderr)


def test_a_reload_to_a_config_that_needs_a_missing_extra_is_rejected(tmp_path: Path) -> None:
    config = write_config(tmp_path, MOCK)
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(free_port()),
            "--metrics-port", str(free_port())]
    proc = Process("gateway", argv, '"listening"', blocked_env(tmp_path, ("aws",)))
    proc.start(deadline_s=30)
    try:
        write_config(tmp_path, MOCK, BEDROCK)
        proc.send(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not any('"reload_rejected"' in line for line in proc.lines) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the drained output for a condition, with a deadline
        rejected = [line for line in proc.lines if '"reload_rejected"' in line]
        assert rejected and "llm-gateway[aws]" in rejected[0], proc.output()
        assert proc.alive()
    finally:
        proc.stop()


def test_a_deployment_without_credentials_is_named_with_the_fix_in_the_log_only(
        aws_env: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(parse_config({
        "auth": {"keys": [{"name": "k", "key": "gw-extras-key-0001"}]},
        "providers": {"bedrock-us": {"type": "bedrock", "region": "us-east-1", "base_url": "http://127.0.0.1:9"}},
        "models": [{"name": "m", "deployments": [{"provider": "bedrock-us", "model": "amazon.nova-pro-v1:0"}]}],
    }, env={}))
    client = openai.OpenAI(base_url=gw.base_url, api_key="gw-extras-key-0001", max_retries=0)
    with capture_logs() as logs, pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502
    failed = [e for e in logs if e["event"] == "upstream_attempt_failed"]
    assert failed and failed[0]["deployment"] == "bedrock-us/amazon.nova-pro-v1:0"
    assert failed[0]["kind"] == "upstream_auth" and failed[0]["log_level"] == "warning"
    assert "aws_access_key_id" in failed[0]["fix"] and "AWS_PROFILE" in failed[0]["fix"]
    body = info.value.response.text
    assert "upstream_auth" in body and "aws_access_key_id" not in body and "AWS_PROFILE" not in body
