"""`gateway migrate` and `gateway admin …` against a running gateway (GATEWAY_ADMIN_URL, GATEWAY_ADMIN_KEY),
as an operator drives them: migrate, create a team and a key, use the key with the SDK, read spend by
team, rotate, revoke."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
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
    assert (first.returncode, first.stdout.split()[:5]) == (0, ["applied", "1,", "2,", "3,", "4"]), first.stderr
    assert again.stdout.startswith("nothing to apply")
    gw.start()
    env = {"GATEWAY_ADMIN_URL": f"http://127.0.0.1:{gw.port}", "GATEWAY_ADMIN_KEY": ADMIN_KEY}

    def admin(*args: str) -> dict[str, object]:
        done = _gateway("admin", *args, "--json", env=env)
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
        assert wrong.returncode == 1 and wrong.stderr.startswith("gateway admin: 401 invalid_api_key: "), wrong.stderr
        token_wins = _gateway("admin", "keys", "list", env={**env, "GATEWAY_ADMIN_TOKEN": "not-a-token"})
        assert token_wins.returncode == 1 and "401 invalid_api_key" in token_wins.stderr
    finally:
        gw.stop()
    unset = _gateway("admin", "keys", "list", env={"GATEWAY_ADMIN_URL": "", "GATEWAY_ADMIN_KEY": ""})
    assert unset.returncode == 2


def test_admin_cli_reads_and_changes_keys_and_teams_as_tables(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path, raw_config(f"sqlite:///{tmp_path}/cli.db"))
    gw.start()
    env = {"GATEWAY_ADMIN_URL": f"http://127.0.0.1:{gw.port}", "GATEWAY_ADMIN_KEY": ADMIN_KEY}

    def admin(*args: str) -> str:
        done = _gateway("admin", *args, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def admin_json(*args: str) -> dict[str, object]:
        return dict(json.loads(admin(*args, "--json")))

    try:
        admin("teams", "create", "search", "--budget-usd", "5", "--rpm", "10")
        created = admin("keys", "create", "alice", "--team", "search", "--metadata", '{"owner": "alice@example.com"}')
        secret = created.splitlines()[-2].removeprefix("key: ")
        assert secret.startswith("sk-gw-") and "(shown once" in created
        assert {"name": "alice", "metadata": {"owner": "alice@example.com"}}.items() <= admin_json(
            "keys", "get", "alice").items()
        listed = admin("keys", "list").splitlines()
        assert listed[0].split()[:3] == ["NAME", "TEAM", "MODELS"]
        assert listed[1].split()[:5] == ["alice", "search", "-", "-", "-"]  # no models, rpm or tpm of its own
        admin("keys", "update", "alice", "--rpm", "7", "--metadata", '{"owner": "bob"}')
        got = admin_json("keys", "get", "alice")
        assert (got["rpm"], got["metadata"], got["team"]) == (7, {"owner": "bob"}, "search")
        admin("keys", "update", "alice", "--clear", "rpm,team")
        assert {"rpm": None, "team": None}.items() <= admin_json("keys", "get", "alice").items()
        admin("teams", "update", "search", "--budget-usd", "9", "--clear", "rpm")
        team = admin_json("teams", "get", "search")
        assert (team["budget_usd"], team["rpm"]) == (9.0, None)
        assert "budget_usd     9" in admin("teams", "get", "search").splitlines()
        assert admin("teams", "delete", "search").strip() == "deleted team search"
        assert admin("teams", "list").strip() == "(none)"
        missing = _gateway("admin", "teams", "get", "search", env=env)
        assert missing.returncode == 1
        assert missing.stderr.strip().splitlines() == ["gateway admin: 404 not_found: " + _message(missing.stderr)]
        bad = _gateway("admin", "keys", "update", "alice", "--models", "nope", env=env)
        assert bad.stderr.startswith("gateway admin: 400 invalid_request: ") and "(param: models)" in bad.stderr
        not_object = _gateway("admin", "keys", "update", "alice", "--metadata", "[1]", env=env)
        assert not_object.returncode == 2 and "must be a JSON object" in not_object.stderr
    finally:
        gw.stop()


def _message(stderr: str) -> str:
    return stderr.strip().split(": ", 2)[-1]


@pytest.mark.parametrize("suffix", ["/v1", "/admin/v1", "/v1/"])
def test_a_base_url_with_an_api_path_is_explained(suffix: str) -> None:
    env = {"GATEWAY_ADMIN_URL": "http://127.0.0.1:8080" + suffix, "GATEWAY_ADMIN_KEY": ADMIN_KEY}
    done = _gateway("admin", "keys", "list", env=env)
    assert done.returncode == 2
    assert "set it to the gateway's base URL, http://127.0.0.1:8080 " in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_metrics_port_and_other_servers_are_recognised(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path, raw_config(f"sqlite:///{tmp_path}/cli.db"))
    gw.start()
    try:
        at_metrics = _gateway("admin", "keys", "list", env={
            "GATEWAY_ADMIN_URL": f"http://127.0.0.1:{gw.metrics_port}", "GATEWAY_ADMIN_KEY": ADMIN_KEY})
        assert at_metrics.returncode == 1
        assert "is the gateway's metrics port (server.metrics_port)" in at_metrics.stderr, at_metrics.stderr
        assert len(at_metrics.stderr.strip().splitlines()) == 1
    finally:
        gw.stop()
    with _OtherServer() as port:
        elsewhere = _gateway("admin", "keys", "list", env={
            "GATEWAY_ADMIN_URL": f"http://127.0.0.1:{port}", "GATEWAY_ADMIN_KEY": ADMIN_KEY})
    assert elsewhere.returncode == 1
    assert "answered 404 with '<html>not here</html>', not the gateway's admin API" in elsewhere.stderr


class _OtherServer:
    """Some other web server on a loopback port: 404 in HTML for every path."""

    def __enter__(self) -> int:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"<html>not here</html>"
                self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return int(self.server.server_address[1])

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
