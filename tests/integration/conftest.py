"""Fixtures of the integration tests: the scripted IdP, the OTLP receiver, and `aws_env`, an AWS environment
with nothing of the machine's own in it. The store fixtures (`postgres`, `store_url`) are tests/conftest.py's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_idp import FakeIdp
from tests.harness import LoopThread
from tests.otlp_receiver import OtlpReceiver


@pytest.fixture
def idp(servers: LoopThread) -> Iterator[FakeIdp]:
    """A scripted OpenID Connect provider on loopback (tests/fake_idp.py)."""
    server = FakeIdp()
    servers.run(server.start())
    yield server
    servers.run(server.stop())


@pytest.fixture
def receiver(servers: LoopThread) -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP collector on loopback that decodes with opentelemetry-proto (tests/otlp_receiver.py)."""
    r = OtlpReceiver()
    servers.run(r.start())
    yield r
    servers.run(r.stop())


@pytest.fixture
def aws_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing of the machine's own AWS setup: no keys, empty shared files, no instance metadata. The
    folder the shared files would be in (`config`, `credentials`), for a test to write them."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path
