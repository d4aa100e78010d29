"""`gateway migrate` and `gateway admin …` against a running gateway (GATEWAY_ADMIN_URL, GATEWAY_ADMIN_KEY),
as an operator drives them: migrate, create a team and a key, use the key with the SDK, read spend by
team, rotate, revoke."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tests.control_plane import ADMIN_KEY, GatewayProcess, raw_config


def _gateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_migrate_then_admin_cli(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path, raw_config(f"sqlite:///{tmp_path}/cli.db"))
    first, again = _gateway("migrate", "--config", str(gw.config_path)), _gateway("migrate", "--config",
                                                                                 str(gw.config_path))
    assert (first.returncode, first.stdout.split()[:3]) == (0, ["applied", "1,", "2"]), first.stderr
    assert again.stdout.startswith("nothing to apply")
    gw.start()
    env = {"GATEWAY_ADMIN_URL": f"http://127.0.0.1:{gw.port}", "GATEWAY_ADMIN_KEY": ADMIN_KEY}

    def admin(*args: str) -> dict[str, object]:
        done = _gateway("admin", *args, env=env)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    try:
        admin("teams", "create", "platform", "--budget-usd", "500", "--budget-period", "month")
        created = admin("keys", "create", "dev-1", "--team", "platform", "--rpm", "60", "--models", "m")
        client = openai.OpenAI(base_url=gw.base_url, api_key=str(created["key"]), max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        listed = admin("keys", "list")
        assert [k["name"] for k in listed["data"]] == ["dev-1"]  # type: ignore[attr-defined]
        spend = admin("spend", "--group-by", "team,model")
        assert [(r["team"], r["model"], r["requests"]) for r in spend["data"]] == [  # type: ignore[attr-defined]
            ("platform", "m", 1)]
        rotated = admin("keys", "rotate", "dev-1", "--grace-s", "0")
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        admin("keys", "revoke", "dev-1")
        fresh = openai.OpenAI(base_url=gw.base_url, api_key=str(rotated["key"]), max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            fresh.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        audit = admin("audit")
        assert [a["action"] for a in audit["data"]][:2] == ["key.revoke", "key.rotate"]  # type: ignore[attr-defined]
        wrong = _gateway("admin", "keys", "list", env={**env, "GATEWAY_ADMIN_KEY": "nope"})
        assert wrong.returncode == 1 and "invalid_api_key" in wrong.stderr
    finally:
        gw.stop()
    unset = _gateway("admin", "keys", "list", env={"GATEWAY_ADMIN_URL": "", "GATEWAY_ADMIN_KEY": ""})
    assert unset.returncode == 2
