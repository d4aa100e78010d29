"""A hung PostgreSQL (every server process stopped with SIGSTOP) costs the answers one ledger wait, not
one each: once a commit missed `store.ledger_wait_s`, the store is marked failing and answers stop
waiting; the rows are kept and committed once it answers again (docs/keys-teams-spend.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from tests.control_plane import admin_call, store_config
from tests.harness import GatewayServer, LoopThread
from tests.postgres_server import PostgresServer

# bounds the wait a hung database costs: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

WAIT_S = 2.0


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as pg:
        yield pg


@pytest.fixture
def gateway(servers: LoopThread, postgres: PostgresServer) -> Iterator[GatewayServer]:
    gw = GatewayServer(store_config(postgres.new_database(), ledger_wait_s=WAIT_S))
    servers.run(gw.start())
    yield gw
    servers.run(gw.stop())


def test_a_hung_postgres_costs_one_wait_not_one_per_answer(gateway: GatewayServer, postgres: PostgresServer) -> None:
    key = admin_call(gateway.port, "POST", "keys", {"name": "busy"})[1]["key"]
    client = openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)

    def chat() -> None:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    chat()
    control = gateway.app.runtime.control
    assert control is not None
    ledger = control.ledger
    postgres.pause()
    try:
        t0 = time.monotonic()
        chat()  # its commit hangs: the answer comes after one wait ...
        print(f"the first answer with the database hung took {time.monotonic() - t0:.2f} s")
        assert ledger.failing  # ... and marks the store failing at once (not at the driver's timeout)
        assert gateway.sample("llm_gateway_ledger_pending_rows") >= 1  # its row waits, and says so
        t0 = time.monotonic()
        for _ in range(3):
            chat()
        waited = time.monotonic() - t0
        print(f"the next three took {waited:.3f} s together")
        assert waited < WAIT_S, f"the next answers waited for the ledger ({waited:.1f} s)"
    finally:
        postgres.resume()
    deadline = time.monotonic() + 30
    while ledger.failing:  # the kept rows are committed once it answers: polled against a deadline
        assert time.monotonic() < deadline, "the ledger did not recover"
        time.sleep(0.05)
    status, spend = admin_call(gateway.port, "GET", "spend?group_by=key")
    assert status == 200 and [r["requests"] for r in spend["data"]] == [5]  # none lost, none twice
    assert gateway.sample("llm_gateway_ledger_pending_rows") == 0
