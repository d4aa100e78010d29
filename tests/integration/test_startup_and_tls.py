"""Start-up as an operator meets it: one line for a port in use, a missing env var, a YAML error (naming
the file), a mistyped key (with a suggestion); TLS on the listener with a trustme certificate and the
official SDK, the certificate re-read on SIGHUP; `--workers` with in-memory limits warns."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import trustme

from tests.ports import free_port

GATEWAY = [sys.executable, "-m", "gateway"]
CONFIG = """
server: {{host: 127.0.0.1, port: {port}, metrics_port: {mport}{extra}}}
auth: {{keys: [{{name: t, key: k}}]}}
providers: {{demo: {{type: mock, ttft_ms: 1, token_delay_ms: 0}}}}
models: [{{name: a, deployments: [{{provider: demo, model: d}}]}}]
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GATEWAY, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def write(tmp_path: Path, port: int, mport: int, extra: str = "") -> Path:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG.format(port=port, mport=mport, extra=extra))
    return cfg


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--config", str(write(tmp_path, port, free_port())))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"gateway: cannot listen on 127.0.0.1:{port} (server.port): address already in use"]
    assert "Traceback" not in result.stdout + result.stderr


def test_a_missing_env_var_is_one_error_not_two(tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG.format(port="'${GW_PORT_UNSET}'", mport=free_port(), extra=""))
    result = run("check-config", str(cfg))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "server.port: environment variable GW_PORT_UNSET is not set and has no default"]


def test_a_yaml_error_names_the_file_and_a_typo_gets_a_suggestion(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("server: {port: 1\nmodels: [")
    result = run("check-config", str(broken))
    assert result.returncode == 2 and result.stderr.startswith(f"{broken}: not valid YAML at line ")
    typo = write(tmp_path, free_port(), free_port(), ", metrics_prot: 1")
    result = run("check-config", str(typo))
    assert 'server.metrics_prot: unknown key (did you mean "metrics_port"?)' in result.stderr


def issue(ca: trustme.CA, cert: Path, key: Path) -> None:
    leaf = ca.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))


def sdk(port: int, ca: trustme.CA) -> openai.OpenAI:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return openai.OpenAI(base_url=f"https://127.0.0.1:{port}/v1", api_key="k", max_retries=0,
                         http_client=openai.DefaultHttpxClient(verify=ctx, timeout=10))


def wait_until_trusted(port: int, ca: trustme.CA, deadline_s: float = 15) -> list[str]:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return [m.id for m in sdk(port, ca).models.list()]
        except openai.APIConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # start-up and the reload are asynchronous: poll their visible effect


def test_tls_listener_with_the_official_sdk_and_a_certificate_reloaded_on_sighup(tmp_path: Path) -> None:
    first, second = trustme.CA(), trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    issue(first, cert, key)
    port = free_port()
    cfg = write(tmp_path, port, free_port(), f", tls: {{cert_file: {cert}, key_file: {key}}}")
    proc = subprocess.Popen([*GATEWAY, "serve", "--config", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert wait_until_trusted(port, first) == ["a"]
        answer = sdk(port, first).chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
        issue(second, cert, key)  # the certificate is rotated in place, as cert-manager does
        proc.send_signal(signal.SIGHUP)
        assert wait_until_trusted(port, second) == ["a"], "new handshakes present the new certificate"
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_certificate_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    tls = f", tls: {{cert_file: {tmp_path}/no.crt, key_file: {tmp_path}/no.key}}"
    cfg = write(tmp_path, free_port(), free_port(), tls)
    result = run("serve", "--config", str(cfg))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"gateway: server.tls: cannot load {tmp_path}/no.crt / {tmp_path}/no.key: No such file or directory"]


def test_workers_with_in_memory_limits_warn_and_say_so_in_a_metric(tmp_path: Path) -> None:
    port, mport = free_port(), free_port()
    proc = subprocess.Popen([*GATEWAY, "serve", "--workers", "2", "--config", str(write(tmp_path, port, mport))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        while "workers_with_local_limits" not in line and line:
            line = proc.stdout.readline()
        assert "up to 2x its limits" in line
        deadline = time.monotonic() + 15
        text = ""
        while "llm_gateway_local_limit_workers 2.0" not in text:
            assert time.monotonic() < deadline, text[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=3) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.05)  # the metrics server is not listening yet
    finally:
        proc.terminate()
        proc.wait(20)
