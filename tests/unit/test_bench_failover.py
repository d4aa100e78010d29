"""bench/failover.py's gateways are configured as #61 acceptance 2 needs (accepted by the gateway, both
Redis modes, the key limited so every request is counted in Redis) and its windows' figures are read
as documented. No timing here: the failover's cost is measured only by `python -m bench.failover`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import failover, servers
from gateway.config import load_config


@pytest.mark.parametrize("state", [
    {"backend": "redis", "timeout_ms": 50, "replicas": 2, "redis_mode": "cluster",
     "redis_url": "redis://127.0.0.1:7000/0"},
    {"backend": "redis", "timeout_ms": 50, "replicas": 2, "redis_mode": "sentinel",
     "sentinel": {"master": "gwmaster", "urls": ["redis://127.0.0.1:26379"]}},
])
def test_the_gateways_config_is_accepted_in_both_modes(tmp_path: Path, state: dict[str, object]) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(failover.config_text(9000, state))
    assert servers.check_config(path) == ""
    config = load_config(str(path), env={})
    (key,) = config.auth.keys
    assert key.rpm and key.tpm and config.state.replicas == 2 and config.state.redis_mode == state["redis_mode"]


def test_windows_are_read_by_start_and_added_latency_is_against_the_baseline() -> None:
    timeline = failover.Timeline(samples=[failover.Sample(start=float(i), took_s=0.1 + i / 1000, outcome="200")
                                          for i in range(200)])
    assert failover.took_in(timeline, 10.0, 12.0) == [0.11, 0.111]
    p50, p99, top = failover.percentiles([i / 1000 for i in range(1, 101)])
    assert (round(p50), round(p99), round(top)) == (51, 100, 100)
