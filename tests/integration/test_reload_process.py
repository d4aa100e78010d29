"""SIGHUP on a real `gateway serve` process, as an operator reloads under load: what a reload applies,
when, and what it says it cannot (docs/runbook.md, "Reload rejected"; docs/reference.md, "Commands")."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.fake_google import LOCATION, PROJECT, FakeGoogle, gemini_body, vertex_path
from tests.harness import LoopThread, ProcessLog
from tests.ports import free_port

USER = [{"role": "user", "content": "hi"}]
BASE = """
server: {{host: 127.0.0.1, port: {port}, metrics_port: {mport}}}
auth: {{keys: [{{name: t, key: k}}]}}
providers:
  demo: {{type: mock, ttft_ms: 1, token_delay_ms: 0}}
{providers}
models:
  - {{name: a, deployments: [{{provider: demo, model: d}}]}}
{models}
"""


class Gateway:
    def __init__(self, cfg: Path) -> None:
        self.cfg, self.port, self.mport = cfg, free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: ProcessLog | None = None

    def write(self, providers: str = "", models: str = "", more: str = "", port: int | None = None) -> None:
        self.cfg.write_text(BASE.format(port=port or self.port, mport=self.mport, providers=providers,
                                        models=models) + more)

    def start(self, *args: str) -> ProcessLog:
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(self.cfg), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.log = ProcessLog(self.proc)
        self.log.wait("listening", what="the gateway did not start")
        return self.log

    def hup(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="k", max_retries=0, timeout=20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    g = Gateway(tmp_path / "gw.yaml")
    yield g
    g.stop()


@pytest.fixture
def google(servers: LoopThread) -> Iterator[FakeGoogle]:
    fake = FakeGoogle()
    servers.run(fake.start())
    yield fake
    if fake.hold_tokens is not None:  # a failed test may leave a token request waiting
        servers.loop.call_soon_threadsafe(fake.hold_tokens.set)
    servers.run(fake.stop())


def test_a_reload_takes_over_only_once_its_new_provider_has_a_token(gw: Gateway, google: FakeGoogle,
                                                                      servers: LoopThread, tmp_path: Path) -> None:
    """docs/cloud-providers.md: a reloaded config's first token is fetched before it takes over. The new
    runtime was swapped in first and its signers started after, so a request right after the SIGHUP
    reached the new `vertex` provider unsigned (401 from Vertex, the client's request failed)."""
    gw.write()
    log = gw.start()
    hold = asyncio.Event()
    google.hold_tokens = hold
    sa = google.service_account_file(tmp_path)
    gw.write(providers=f"  vx: {{type: vertex, project: {PROJECT}, location: {LOCATION}, "
                       f"base_url: '{google.base_url}', credentials_file: '{sa}'}}",
             models="  - {name: v, deployments: [{provider: vx, model: gemini-2.5-pro}]}")
    gw.hup()
    servers.run(asyncio.wait_for(google.token_asked.wait(), 15))  # the reload is starting its signer
    with pytest.raises(openai.NotFoundError):  # the old config serves until the new one has its token
        gw.client().chat.completions.create(model="v", messages=USER)  # type: ignore[arg-type]
    assert log.with_event("reloaded") == []
    servers.loop.call_soon_threadsafe(hold.set)
    log.wait("reloaded", what="the reload did not complete once the token came")
    google.enqueue(vertex_path("gemini-2.5-pro", False), gemini_body("signed"))
    got = gw.client().chat.completions.create(model="v", messages=USER)  # type: ignore[arg-type]
    assert got.choices[0].message.content == "signed"
    assert google.received[-1].headers["Authorization"] == f"Bearer {google.issued[-1]}"


def test_a_reload_names_the_keys_it_cannot_apply_and_applies_the_rest(gw: Gateway) -> None:
    """The state backend, the cache's sizes and logging are read at start: a reload that changes them
    used to keep them without a word (only `store.*` was warned of). One `reload_needs_restart` line
    names each such key, never its value; `serve --port` over the file's port is not a change; the rest
    of the file (a new model, the response owners' TTL) is applied."""
    file_port = free_port()  # the file's; `--port` below is the one served
    gw.write(port=file_port)
    log = gw.start("--port", str(gw.port))
    gw.write(port=file_port, models="  - {name: b, deployments: [{provider: demo, model: d}]}", more="""
state: {backend: redis, redis_url: 'redis://:hunter2-SECRET@127.0.0.1:1/0', timeout_ms: 80,
        response_owner_ttl_s: 60}
cache: {max_entries: 5, ttl_s: 10}
logging: {level: debug}
""")
    gw.hup()
    log.wait("reloaded")
    [line] = log.wait("reload_needs_restart")
    assert line["keys"] == ["state.backend", "state.redis_url", "state.timeout_ms",
                            "cache.max_entries", "logging.level"]
    assert sorted(m.id for m in gw.client().models.list()) == ["a", "b"], "the rest is applied"
    gw.write(port=free_port())  # the file's own port moves: the socket stays where it is
    gw.hup()
    log.wait("reloaded", count=2)
    assert log.wait("reload_needs_restart", count=2)[1]["keys"][0] == "server.port"
    assert b"hunter2" not in b"".join(log.lines)
