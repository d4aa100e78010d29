"""Fixtures of the integration tests that run once per store engine: a PostgreSQL server per module, and
a store URL per test (a SQLite file, or a new database on that server). A module may define its own.
Also the scripted IdP, and `aws_env`: an AWS environment with nothing of the machine's own in it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_idp import FakeIdp
from tests.harness import LoopThread
from tests.postgres_server import PostgresServer


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as pg:
        yield pg


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/gateway.db"
    pg: PostgresServer = request.getfixturevalue("postgres")
    return pg.new_database()


@pytest.fixture
def idp(servers: LoopThread) -> Iterator[FakeIdp]:
    """A scripted OpenID Connect provider on loopback (tests/fake_idp.py)."""
    server = FakeIdp()
    servers.run(server.start())
    yield server
    servers.run(server.stop())


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
