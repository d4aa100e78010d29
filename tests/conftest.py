"""Shared fixtures: a background loop running the fake upstream and gateways on 127.0.0.1; a PostgreSQL
server per module, and a store URL per test run once per store engine (a SQLite file, or a new database on
that server). A module may define its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config.types import Config
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread, gateway_config
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
def servers() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


@pytest.fixture
def upstream(servers: LoopThread) -> Iterator[FakeUpstream]:
    up = FakeUpstream()
    servers.run(up.start())
    yield up
    servers.run(up.stop())


@pytest.fixture
def make_gateway(servers: LoopThread, upstream: FakeUpstream) -> Iterator[Callable[..., GatewayServer]]:
    started: list[GatewayServer] = []

    def make(config: Config | None = None, **overrides: Any) -> GatewayServer:
        gw = GatewayServer(config or gateway_config(upstream.base_url, **overrides))
        servers.run(gw.start())
        started.append(gw)
        return gw

    yield make
    for gw in started:
        servers.run(gw.stop())


@pytest.fixture
def gateway(make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway()
