"""SIGHUP reloads the config file; an invalid new file is rejected and the old config stays; a TLS key
with a passphrase loads from the environment and never waits on a terminal; reload work runs off the
event loop (a stream keeps flowing while a large config compiles)."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import openai
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from gateway.config import parse_config
from gateway.config.types import Config
from gateway.server import _reload
from tests.chat_scripts import chunk, text_stream
from tests.fake_upstream import FakeUpstream, Pause, Script, sse
from tests.harness import GatewayServer, LoopThread, ProcessLog
from tests.ports import free_port

# bounds a stream's gaps during a reload: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

CONFIG = """
server: {{host: 127.0.0.1}}
auth: {{keys: [{{name: t, key: k}}]}}
providers: {{demo: {{type: mock, ttft_ms: 1, token_delay_ms: 0}}}}
models: [{models}]
"""


def models_of(port: int, key: str = "k") -> list[str]:
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=5)
    return [m.id for m in c.models.list()]


def wait_for(port: int, expected: list[str]) -> list[str]:
    deadline = time.monotonic() + 10
    seen: list[str] = []
    while time.monotonic() < deadline:
        try:
            seen = models_of(port)
        except openai.APIConnectionError:
            seen = []
        if seen == expected:
            return seen
        time.sleep(0.05)  # the reload is asynchronous to the signal: poll its visible effect
    return seen


def test_sighup_reloads_and_rejects_a_bad_file(tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    one = "{name: a, deployments: [{provider: demo, model: d}]}"
    cfg.write_text(CONFIG.format(models=one))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port", str(port),
                             "--metrics-port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(port, ["a"]) == ["a"]
        cfg.write_text(CONFIG.format(models=one + ", {name: b, deployments: [{provider: demo, model: d}]}"))
        proc.send_signal(signal.SIGHUP)
        assert wait_for(port, ["a", "b"]) == ["a", "b"]
        cfg.write_text(CONFIG.format(models="{name: c, deployments: [{provider: nope, model: d}]}"))
        log = ProcessLog(proc)
        proc.send_signal(signal.SIGHUP)
        log.wait("reload_rejected", timeout_s=10, what="the bad file was not reported")
        assert models_of(port) == ["a", "b"], "the old config stays"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        log.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    rejected = log.with_event("reload_rejected")[0]
    assert b'unknown provider' in rejected


TLS_CONFIG = """
server: {{host: 127.0.0.1, port: {port}, metrics_port: {mport}, tls: {{cert_file: {cert}, key_file: {key}{pw}}}}}
auth: {{keys: [{{name: t, key: k}}]}}
providers: {{demo: {{type: mock, ttft_ms: 1, token_delay_ms: 0}}}}
models: [{{name: a, deployments: [{{provider: demo, model: d}}]}}]
"""


def encrypted_key(ca: trustme.CA, cert: Path, key: Path, passphrase: bytes) -> None:
    leaf = ca.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    private = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.BestAvailableEncryption(passphrase)))


def tls_models(port: int, ca: trustme.CA) -> list[str]:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    c = openai.OpenAI(base_url=f"https://127.0.0.1:{port}/v1", api_key="k", max_retries=0,
                      http_client=openai.DefaultHttpxClient(verify=ctx, timeout=5))
    return [m.id for m in c.models.list()]


def test_an_encrypted_key_without_its_passphrase_is_a_clear_error_at_start(tmp_path: Path) -> None:
    """Issue #27: OpenSSL prompted for the passphrase on the terminal and the gateway froze. A key needs
    `server.tls.key_password`; without it, start-up fails with one line (stdin open: nothing may wait
    on it)."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    encrypted_key(trustme.CA(), cert, key, b"s3cret-pass")
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(TLS_CONFIG.format(port=free_port(), mport=free_port(), cert=cert, key=key, pw=""))
    result = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg)], input="",
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"gateway: server.tls: cannot load {cert} / {key}: the key is "
                                                  "encrypted and server.tls.key_password is not set"]


def test_a_key_passphrase_from_the_environment_and_a_reload_that_cannot_load_its_key(tmp_path: Path) -> None:
    """The passphrase comes from the environment (${VAR}); a reload whose key does not load (the
    passphrase dropped from the file) is rejected with a log line, and the old certificate serves on."""
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    encrypted_key(ca, cert, key, b"s3cret-pass")
    cfg, port = tmp_path / "gw.yaml", free_port()
    fields = {"port": port, "mport": free_port(), "cert": cert, "key": key}
    cfg.write_text(TLS_CONFIG.format(**fields, pw=", key_password: '${GW_TLS_KEY_PASSWORD}'"))
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(cfg)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "GW_TLS_KEY_PASSWORD": "s3cret-pass"})
    log = ProcessLog(proc)
    try:
        log.wait("listening")
        assert tls_models(port, ca) == ["a"]
        cfg.write_text(TLS_CONFIG.format(**fields, pw=""))
        proc.send_signal(signal.SIGHUP)
        log.wait("reload_rejected", timeout_s=10, what="the key that does not load was not reported")
        assert tls_models(port, ca) == ["a"], "the old certificate serves on"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        log.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    rejected = log.with_event("reload_rejected")[0]
    assert b"the key is encrypted and server.tls.key_password is not set" in rejected
    assert b"s3cret-pass" not in b"".join(log.lines)


def test_a_reload_compiles_off_the_loop_and_a_stream_keeps_flowing(servers: LoopThread, upstream: FakeUpstream,
                                                                  gateway: GatewayServer, tmp_path: Path) -> None:
    """CONTRACT §5.3: reload work must not stall the loop. A config of 5,000 models takes seconds to read
    and compile; a stream that began before the SIGHUP keeps its pace throughout (gaps measured
    between chunks, from the first chunk after the reload began until it ended)."""
    upstream.enqueue("/v1/chat/completions", Script([*text_stream(["x"]).parts[:1],
                                                     *[p for _ in range(3000) for p in (Pause(0.005),
                                                                                       sse(chunk({"content": "t"})))],
                                                     b"data: [DONE]\n\n"]))
    models = ", ".join(f"{{name: m{i}, deployments: [{{provider: up, model: d}}]}}" for i in range(5000))
    cfg = tmp_path / "big.yaml"
    cfg.write_text(f"auth: {{allow_unauthenticated: true}}\nproviders: {{up: {{type: openai, base_url: "
                   f"'{upstream.base_url}/v1', api_key: k}}}}\nmodels: [{{name: m, deployments: [{{provider: up, "
                   f"model: d}}]}}, {models}]\n")
    app, api = gateway.app, gateway.api
    assert app is not None and api is not None
    client = openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=30)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    chunks = iter(stream)
    next(chunks)  # the stream is flowing
    started = time.monotonic()
    reload = asyncio.run_coroutine_threadsafe(_reload(app, api, str(cfg), asyncio.Lock()), servers.loop)
    arrivals = [time.monotonic()]
    for _ in chunks:
        arrivals.append(time.monotonic())
        if reload.done():
            break
    took = time.monotonic() - started
    reload.result()
    stream.close()
    assert len(app.runtime.config.models) == 5001, "the reload was applied"
    assert reload.done() and took > 0.5, f"the reload took {took:.2f}s: too fast to show a stall"
    gaps = [b - a for a, b in pairwise(arrivals)]
    # on the loop, the reload would be one gap as long as itself; off it, the stream only waits out the
    # GIL's switch interval and the machine's other load (relative to the reload's length, so a busy
    # machine that stretches both does not fail it)
    longest = max(gaps)
    assert len(gaps) > 20 and longest < min(1.0, took / 2), f"longest gap {longest:.3f}s during a {took:.2f}s reload"


def test_a_reload_keeps_a_breaker_only_while_its_deployment_and_its_settings_stay(
        upstream: FakeUpstream, servers: LoopThread, make_gateway: Callable[..., GatewayServer]) -> None:
    """Every reload carried the whole breaker table over: a provider's changed `breaker` settings never
    applied to a deployment that had had traffic, and the labels of removed deployments stayed forever."""
    def config(failures: int, with_q: bool = True) -> Config:
        providers: dict[str, Any] = {
            "p": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "x",
                  "breaker": {"failures": failures}},
            "q": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "x"}}
        deployments = [{"provider": "p", "model": "m"}, *([{"provider": "q", "model": "m"}] if with_q else [])]
        return parse_config({"auth": {"allow_unauthenticated": True}, "providers": providers,
                             "models": [{"name": "m", "deployments": deployments}]}, env={})

    gw = make_gateway(config(failures=1))
    assert gw.app is not None
    app = gw.app

    def opened() -> dict[str, bool]:
        """Each deployment's breaker, failed once now: whether it lets a request through."""
        async def run() -> dict[str, bool]:
            rt, now = app.runtime, time.monotonic()
            return {d.label: rt.breaker(d).allow(now) for d in rt.config.models["m"].deployments}
        return servers.run(run())

    async def fail(label: str) -> None:
        rt = app.runtime
        [d] = [d for d in rt.config.models["m"].deployments if d.label == label]
        rt.breaker(d).record_failure(time.monotonic())

    servers.run(fail("p/m"))  # one failure opens it (failures: 1)
    assert opened() == {"p/m": False, "q/m": True}
    servers.run(app.reload(config(failures=1)))  # the same settings: still open
    assert opened() == {"p/m": False, "q/m": True}
    servers.run(app.reload(config(failures=3)))  # new settings: closed, counting under them
    assert opened() == {"p/m": True, "q/m": True}
    servers.run(app.reload(config(failures=3, with_q=False)))
    assert set(app.runtime.breakers) == {"p/m"}  # the removed deployment's breaker is gone
