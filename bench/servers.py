"""Start and stop the processes a benchmark measures: the fake upstream, the gateway and nginx.

Each runs as its own non-daemon child on a free 127.0.0.1 port, with its files in the run's temp dir;
`stop` ends it (and, for the gateway's `--workers` and nginx, the children it forked) by pid.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.procstat import tree

CHAT_PATH = "/v1/chat/completions"
MESSAGES_PATH = "/v1/messages"
MESSAGES_MODEL = "ma"  # the gateway's model with one native `anthropic` deployment
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{CHAT_PATH}"

    def url_for(self, api: str) -> str:
        return f"http://127.0.0.1:{self.port}{MESSAGES_PATH if api == 'messages' else CHAT_PATH}"

    def wait_ready(self, path: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {timeout_s} s; see {self.log}")

    def stop(self) -> None:
        pids = tree(self.pid)
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            self.proc.wait(5)
        for p in pids[1:]:  # forked children left behind by a supervisor that died first
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def spawn(name: str, argv: list[str], workdir: Path, port: int, cwd: Path = ROOT) -> Server:
    log = workdir / f"{name}.log"
    with open(log, "ab") as out:  # a restarted server appends to its earlier log
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, stdin=subprocess.DEVNULL)
    return Server(name, proc, port, log)


def start_upstream(workdir: Path, jwks: Path | None = None) -> Server:
    """`jwks`: a key set file the upstream serves at `GET /jwks` (bench/variants.py's IdP tokens)."""
    port = free_port()
    extra = ["--jwks", str(jwks)] if jwks else []
    server = spawn("upstream", [sys.executable, "-m", "bench.upstream", "--port", str(port), *extra], workdir, port)
    server.wait_ready("/healthz")
    return server


def redaction_missing() -> str:
    """Why the gateway can't run with redaction yet ('' when it can): the redaction core must be
    committed (a file another helper is still writing is not measured)."""
    r = subprocess.run(["git", "log", "-1", "--format=%h", "--", "gateway/core/redact/window.py"], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    if r.returncode == 0:
        return "" if r.stdout.strip() else "gateway/core/redact/window.py is not committed yet"
    window = ROOT / "gateway" / "core" / "redact" / "window.py"
    return "" if window.exists() else "gateway/core/redact/window.py is missing"


def start_otlp_sink(workdir: Path) -> Server:
    port = free_port()
    server = spawn("otlp-sink", [sys.executable, "-m", "bench.otlp_sink", "--port", str(port)], workdir, port)
    server.wait_ready("/healthz")
    return server


def gateway_config(upstream_port: int, redaction: bool, otlp_endpoint: str | None = None,
                   store_url: str | None = None, faults: bool = False, ledger_journal: str | None = None,
                   sched_slice_us: int = 0, log_level: str = "warning") -> str:
    """The brief's minimal config: one OpenAI-compatible upstream, no auth, warnings-only logging (the per-request info
    line stays out of the measurement; `log_level` "info" writes it); and the same fake upstream as an `anthropic`
    provider behind model `ma`, for the Messages API scenarios. With `otlp_endpoint`, every request is traced
    (sampling 1.0) and its spans exported there. With `store_url`, the control plane's store is on: every request's
    spend row is journaled (SQLite, or `ledger_journal`) or committed (group commit) before its last byte. With
    `faults`, model `m` tries a deployment under the upstream's `/fail/` prefix first (a 503 once the upstream's
    faults are armed) and falls back to the plain one. `sched_slice_us`: `server.sched_slice_us` (0: not set)."""
    timeouts = "timeouts: {connect_s: 5, first_token_s: 60, idle_s: 60, total_s: 600}"
    mode = "default" if redaction else "'off'"
    base = f"http://127.0.0.1:{upstream_port}"
    flaky = "{provider: flaky, model: up-model}, " if faults else ""
    flaky_provider = (f',\n            flaky: {{type: openai, base_url: "{base}/fail/v1", api_key: x, {timeouts}}}'
                      if faults else "")
    slice_us = f", sched_slice_us: {sched_slice_us}" if sched_slice_us else ""
    lines = [
        f"server: {{host: 127.0.0.1, keepalive_after_s: 30{slice_us}}}",
        "auth: {allow_unauthenticated: true}",
        f'providers: {{up: {{type: openai, base_url: "{base}/v1", api_key: x, {timeouts}}},',
        f'            anth: {{type: anthropic, base_url: "{base}", api_key: x, {timeouts}}}{flaky_provider}}}',
        f"models: [{{name: m, deployments: [{flaky}{{provider: up, model: up-model}}], redaction: {mode}}},",
        f"         {{name: {MESSAGES_MODEL}, deployments: [{{provider: anth, model: up-model}}], redaction: {mode}}}]",
        f"logging: {{level: {log_level}}}",
    ]
    if redaction:
        lines.append("redaction: {profiles: {default: {rules: [secrets, pii]}}}")
    if otlp_endpoint:
        lines.append(f'telemetry: {{otlp_endpoint: "{otlp_endpoint}", sampling_ratio: 1.0}}')
    if store_url:
        journal = f', ledger_journal: "{ledger_journal}"' if ledger_journal else ""
        lines.append(f'store: {{url: "{store_url}"{journal}}}')
    return "\n".join(lines) + "\n"


def without_slice(config: Path, name: str) -> Path:
    """A copy of a bench config without `server.sched_slice_us`: what a `-base` target runs beside it (an
    older checkout may not know the key; an A/B of the setting runs the same code without it)."""
    path = config.with_name(f"{name}.yaml")
    path.write_text(re.sub(r", sched_slice_us: \d+", "", config.read_text()))
    return path


def check_config(path: Path) -> str:
    """'' when `gateway check-config` accepts the file, else its complaint."""
    r = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    return "" if r.returncode == 0 else ((r.stderr or r.stdout).strip().splitlines() or ["failed"])[-1]


def start_gateway(name: str, workdir: Path, config: Path, workers: int = 1, source: Path = ROOT,
                  lag: Path | None = None, python: str = sys.executable) -> Server:
    """`source`: the checkout whose `gateway` package runs (`python -m` puts the working directory
    first on the import path), for an A/B run against another commit. `lag`: run it under the loop-lag
    probe (`bench/loop_lag.py`), writing `<lag>-<pid>.txt`. `python`: the interpreter (an A/B of two
    builds of it: a venv of the other interpreter with the gateway's dependencies)."""
    port = free_port()
    launch = [python, str(ROOT / "bench" / "loop_lag.py"), str(lag)] if lag else [python, "-m", "gateway"]
    argv = [*launch, "serve", "--config", str(config), "--port", str(port),
            "--metrics-port", str(free_port()), "--workers", str(workers)]
    server = spawn(name, argv, workdir, port, cwd=source)
    server.wait_ready("/healthz")
    return server


def ensure_nginx() -> str:
    """The nginx binary; installed with apt-get when missing (needs root, as `make bench` runs in CI)."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        raise RuntimeError("nginx is not installed and this is not root: apt-get install nginx")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light"], check=True, env=env)
    return shutil.which("nginx") or "/usr/sbin/nginx"


def nginx_conf(workdir: Path, port: int, upstream_port: int, workers: int = 1) -> str:
    """A plain streaming relay: no buffering, HTTP/1.1 with pooled keep-alive connections upstream."""
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
    temp = "\n".join(f"    {kind}_temp_path {workdir}/nginx-{kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""{user}
worker_processes {workers};
daemon off;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
worker_rlimit_nofile 20000;
events {{ worker_connections 16384; }}
http {{
    access_log off;
{temp}
    upstream fake {{ server 127.0.0.1:{upstream_port}; keepalive 512; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        location / {{
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


def start_pyrelay(workdir: Path, upstream_port: int) -> Server:
    """`bench.pyrelay`: bytes through a uvloop process and nothing else, the floor of a Python relay."""
    port = free_port()
    server = spawn("pyrelay", [sys.executable, "-m", "bench.pyrelay", "--port", str(port), "--upstream-port",
                               str(upstream_port)], workdir, port)
    server.wait_ready("/healthz")
    return server


def start_nginx(workdir: Path, upstream_port: int, binary: str, workers: int = 1) -> Server:
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(workdir, port, upstream_port, workers))
    server = spawn("nginx", [binary, "-p", str(workdir), "-c", str(conf)], workdir, port)
    server.wait_ready("/healthz")
    return server
