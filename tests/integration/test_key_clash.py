"""A config key and a stored key share one namespace (CONTRACT §2: two keys, config or store, with one
name or one secret are a config error; docs/keys-teams-spend.md, "Config keys and stored keys"). A start
whose config clashes with the store's keys exits 2 with the config error's line; a SIGHUP to such a config
is `reload_rejected` and the old config keeps serving; a stored key that clashes at run time (written by a
replica with another config) is logged and refused there, the config key winning. Real gateway processes
on one SQLite store."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.control_plane import CONFIG_KEY, admin_call, raw_config
from tests.harness import ProcessLog
from tests.ports import free_port

EXIT_WITHIN_S = 60


class Served:
    """`gateway serve --config` with its output read line by line (`ProcessLog`)."""

    def __init__(self, config: Path):
        self.config, self.port, self.metrics_port = config, free_port(), free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(config),
                                      "--port", str(self.port), "--metrics-port", str(self.metrics_port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
        self.log = ProcessLog(self.proc)

    def get(self, path: str, key: str) -> tuple[int, Any]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def shadowed(self) -> float:
        """`llm_gateway_stored_keys_shadowed` on this process's metrics port."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as resp:
            found = re.search(r"^llm_gateway_stored_keys_shadowed (\S+)$", resp.read().decode(), re.MULTILINE)
        assert found, "llm_gateway_stored_keys_shadowed is not exported"
        return float(found.group(1))

    def models(self, key: str = CONFIG_KEY) -> list[str]:
        status, body = self.get("/v1/models", key)
        assert status == 200, body
        return [m["id"] for m in body["data"]]


@contextmanager
def serving(config: Path) -> Iterator[Served]:
    gw = Served(config)
    try:
        gw.log.wait("listening", timeout_s=30)  # fails with the process's output
        yield gw
    finally:
        if gw.proc.poll() is None:
            gw.proc.send_signal(signal.SIGTERM)
            try:
                gw.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                gw.proc.kill()
                gw.proc.wait()


def write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path


def with_key(raw: dict[str, Any], name: str, secret: str) -> dict[str, Any]:
    """`raw` with a second config key (`auth.keys[1]`) and a second model, so a reload is visible."""
    keys = [*raw["auth"]["keys"], {"name": name, "key": secret}]
    models = [*raw["models"], {"name": "added", "deployments": [{"provider": "mock", "model": "mock-3"}]}]
    return {**raw, "auth": {"keys": keys}, "models": models}


def stored_key(gw: Served, name: str) -> str:
    """A key created through the admin API; its secret."""
    status, body = admin_call(gw.port, "POST", "keys", {"name": name, "budget_usd": 5})
    assert status == 201, body
    return str(body["key"])


@pytest.fixture
def raw(tmp_path: Path) -> dict[str, Any]:
    return raw_config(f"sqlite:///{tmp_path}/gateway.db")


# the config key that clashes, and the line the config error prints for it
NAME_CLASH = ('auth.keys[1].name: "team-a" is also the name of a stored key (store.url): rename this key, '
              "or revoke the stored one")
SECRET_CLASH = 'auth.keys[1].key: the same secret as the stored key "team-a": every key needs its own'


def clashing(raw: dict[str, Any], how: str, secret: str) -> tuple[dict[str, Any], str]:
    """The config with a key that clashes with the stored `team-a` by name or by secret, and its line."""
    if how == "name":
        return with_key(raw, "team-a", "sk-config-team-a-" + "x" * 20), NAME_CLASH
    return with_key(raw, "config-copy", secret), SECRET_CLASH


@pytest.mark.parametrize("how", ["name", "secret"])
def test_a_start_whose_config_key_clashes_with_a_stored_key_exits_2_naming_it(
        tmp_path: Path, raw: dict[str, Any], how: str) -> None:
    with serving(write(tmp_path / "gw.yaml", raw)) as gw:
        secret = stored_key(gw, "team-a")
    config, line = clashing(raw, how, secret)
    result = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(write(tmp_path / "gw.yaml",
                             config)), "--port", str(free_port()), "--metrics-port", str(free_port())],
                            capture_output=True, text=True, timeout=EXIT_WITHIN_S, env={**os.environ})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [line]
    assert "Traceback" not in result.stdout + result.stderr and '"listening"' not in result.stdout


@pytest.mark.parametrize("how", ["name", "secret"])
def test_a_reload_to_a_config_key_that_clashes_with_a_stored_key_is_rejected(
        tmp_path: Path, raw: dict[str, Any], how: str) -> None:
    path = write(tmp_path / "gw.yaml", raw)
    with serving(path) as gw:
        secret = stored_key(gw, "team-a")
        config, line = clashing(raw, how, secret)
        write(path, config)
        gw.proc.send_signal(signal.SIGHUP)
        (rejected,) = gw.log.wait("reload_rejected", timeout_s=30, what="the clashing config was not rejected")
        assert rejected["errors"] == [line]
        assert not gw.log.with_event("reloaded")
        assert gw.models() == ["m", "other"], "the old config stays"
        status, spend = gw.get("/v1/gateway/spend", secret)  # the stored key is served as before
        assert status == 200 and spend["key"] == "team-a" and spend["budget_usd"] == 5, spend


def test_a_stored_key_that_clashes_at_run_time_is_refused_and_the_config_key_wins(
        tmp_path: Path, raw: dict[str, Any]) -> None:
    """Replica `b` has `team-a` in its config; replica `a` (an older config, without it) creates a stored
    `team-a`. `b` logs the clash once, naming both, counts it (`llm_gateway_stored_keys_shadowed`, 1 while
    it lasts, 0 once the stored key is revoked) and keeps answering `team-a` with its config key; the stored
    key's secret is refused there (and served by `a`)."""
    config_secret = "sk-config-team-a-" + "y" * 20
    with serving(write(tmp_path / "a.yaml", raw)) as a, \
            serving(write(tmp_path / "b.yaml", with_key(raw, "team-a", config_secret))) as b:
        secret = stored_key(a, "team-a")
        (shadowed,) = b.log.wait("stored_key_shadowed", timeout_s=30, what="replica b did not see the clash")
        assert (shadowed["key"], shadowed["config_key"], shadowed["field"]) == ("team-a", "auth.keys[1]", "name")
        assert shadowed["level"] == "error"
        assert (b.shadowed(), a.shadowed()) == (1, 0)  # set before the line is logged
        status, body = b.get("/v1/gateway/spend", secret)
        assert status == 401, body
        status, spend = b.get("/v1/gateway/spend", config_secret)
        assert status == 200 and spend["key"] == "team-a" and spend["budget_usd"] is None, spend
        status, spend = a.get("/v1/gateway/spend", secret)
        assert status == 200 and spend["key"] == "team-a" and spend["budget_usd"] == 5, spend
        assert not a.log.with_event("stored_key_shadowed")
        bob = stored_key(a, "bob")  # another change: b reloads the snapshot, the clash still in it
        assert within(10.0, lambda: b.get("/v1/gateway/spend", bob)[0] == 200), "b never saw bob"
        assert len(b.log.with_event("stored_key_shadowed")) == 1, "logged once per clash, not once per snapshot"
        assert b.shadowed() == 1, "still the one stored key, whatever the snapshots"
        assert admin_call(a.port, "DELETE", "keys/team-a")[0] == 200  # the clash goes away
        assert within(10.0, lambda: b.shadowed() == 0), "b still counts the revoked key"


def within(seconds: float, cond: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # polling another process's visible effect, bounded by the deadline
    return True
