"""Shared fixtures: a background loop running the fake upstream and gateways on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.config.types import Config
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread, gateway_config


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
