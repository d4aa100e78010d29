"""Session fixtures: one real llama.cpp server with Gemma 3 270M, one real gateway process in front of it
(started from a config file, as users start it), and a ledger of what clients got through the gateway, so
the metrics test can compare /metrics with it.

Install what this needs with `bash scripts/e2e-deps.sh` (`make test` runs it)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import processes

GATEWAY_KEY = "gw-e2e-key-not-a-secret-1234"
MODEL = "gemma"  # the gateway's name for the model
REDACTED_MODEL = "gemma-redacted"  # the same deployment behind the redaction profile `p`
PROVIDER = "llama"
# The word the redaction test asks the model to repeat, masked by the profile's custom rule `word`.
WORD = "Zanzibar"
WORD_PATTERN = "[Zz]anzibar"

CONFIG = """\
server: {{host: 127.0.0.1, keepalive_after_s: 60}}
auth:
  keys:
    - {{name: e2e, key: "${{E2E_GATEWAY_KEY}}"}}
providers:
  {provider}:
    type: openai
    base_url: {base_url}
    timeouts: {{connect_s: 5, first_token_s: 120, idle_s: 60, total_s: 300}}
models:
  - name: {model}
    deployments: [{{provider: {provider}, model: {alias}}}]
  - name: {redacted}
    deployments: [{{provider: {provider}, model: {alias}}}]
    redaction: p
redaction:
  profiles:
    p:
      rules: [secrets]
      custom:
        - {{name: word, pattern: '{pattern}'}}
logging: {{level: info, format: json}}
"""


@dataclass(frozen=True, slots=True)
class Served:
    """One request answered through the gateway, as its client saw it."""

    model: str
    stream: bool
    usage: tuple[int, int] | None  # (prompt_tokens, completion_tokens), None when the client got none


@dataclass
class Ledger:
    served: list[Served] = field(default_factory=list)

    def record(self, model: str, stream: bool, usage: Any) -> None:
        """`usage` is what the client got: an SDK object, a dict, or None."""
        pair = None
        if usage is not None:
            get = usage.get if isinstance(usage, dict) else lambda k: getattr(usage, k)
            pair = (int(get("prompt_tokens")), int(get("completion_tokens")))
        self.served.append(Served(model, stream, pair))


@dataclass(frozen=True)
class Stack:
    llama_url: str  # the model server's /v1, for direct requests
    gateway_url: str  # the gateway's /v1
    metrics_url: str
    llama: processes.Process
    gateway: processes.Process

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:
            text = resp.read().decode()
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}


def sample(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels` (tokens also carry `key`)."""
    want = frozenset(labels.items())
    return sum(v for (n, have), v in scraped.items() if n == name and want <= have)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    llama, llama_url = processes.llama_server()
    llama.start(deadline_s=110)
    config = Path(tmp_path_factory.mktemp("e2e")) / "gateway.yaml"
    config.write_text(CONFIG.format(provider=PROVIDER, base_url=llama_url, model=MODEL, redacted=REDACTED_MODEL,
                                    alias=processes.LLAMA_MODEL_ALIAS, pattern=WORD_PATTERN))
    gw, gateway_url, metrics_url = processes.gateway(config, {"E2E_GATEWAY_KEY": GATEWAY_KEY})
    try:
        gw.start(deadline_s=30)
        yield Stack(llama_url, gateway_url, metrics_url, llama, gw)
    finally:
        gw.stop()
        llama.stop()


@pytest.fixture(scope="session")
def ledger() -> Ledger:
    return Ledger()


def chat_request(prompt: str, max_tokens: int = 24, stream: bool = False) -> dict[str, Any]:
    """Short, greedy and seeded, so the gateway's answer can be compared with the server's own."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                            "temperature": 0, "seed": 1234}
    if stream:
        # so a usage chunk, if the server sent one, would reach the client and the ledger
        body["stream_options"] = {"include_usage": True}
    return body
