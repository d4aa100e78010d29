"""bench/variants.py's gateways work as the acceptance benchmarks of #58, #59 and #61 need them: every
variant's config is accepted, IdP tokens and the key are both served through the JWKS the fake upstream
serves (and a token of another key is refused), and the Redis variant counts in Redis per request. No
timing here: speed is measured only by `python -m bench.instructions` and `make bench`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import servers, variants
from bench.loadgen import LoadSpec, run_load


def test_every_variant_config_is_accepted_by_the_gateway(tmp_path: Path) -> None:
    base = servers.gateway_config(9000, redaction=True)
    for name, v in variants.TARGETS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(variants.config_text(base, v, 9000, "redis://127.0.0.1:6399/0"))
        assert servers.check_config(path) == "", name


def test_comparisons_set_each_variant_beside_its_reference() -> None:
    names = [[v.name for v in pair] for pair in variants.comparisons("jwt", "latency,weighted", "cluster")]
    assert names == [["jwt", "key"], ["key-latency", "key-ordered"], ["key-weighted", "key-ordered"],
                     ["key-cluster", "key-redis"]]
    assert variants.comparisons("key", "ordered", "redis") == []


def _serve(tmp_path: Path, v: variants.Variant, signer: variants.Signer,
           states: variants.StateServers) -> tuple[servers.Server, servers.Server]:
    upstream = servers.start_upstream(tmp_path, jwks=variants.write_jwks(signer, tmp_path))
    config = tmp_path / f"{v.name}.yaml"
    config.write_text(variants.config_text(servers.gateway_config(upstream.port, redaction=False), v,
                                           upstream.port, states.url(v.state)))
    return upstream, servers.start_gateway(v.name, tmp_path, config)


def _load(gw: servers.Server, bearer: str, requests: int = 6) -> dict[str, int]:
    spec = LoadSpec(url=gw.url, concurrency=2, requests=requests, chunks=5, bearer=bearer)
    result = asyncio.run(run_load(spec))
    return {"ok": result.ok, **result.errors}


def test_a_token_and_the_key_are_served_and_a_stranger_token_is_refused(tmp_path: Path) -> None:
    signer, states = variants.Signer.new(), variants.StateServers()
    upstream, gw = _serve(tmp_path, variants.Variant(auth="jwt", routing="weighted"), signer, states)
    try:
        assert _load(gw, variants.bearer(variants.Variant(auth="jwt"), signer)) == {"ok": 6}
        assert _load(gw, variants.bearer(variants.Variant(auth="key"), signer)) == {"ok": 6}
        assert _load(gw, variants.Signer.new().token(), requests=2) == {"ok": 0, "http_401": 2}
        assert _load(gw, "", requests=2) == {"ok": 0, "http_401": 2}
    finally:
        gw.stop()
        upstream.stop()
        states.close()


def test_the_redis_variant_counts_every_request_in_redis(tmp_path: Path) -> None:
    signer, states = variants.Signer.new(), variants.StateServers()
    v = variants.Variant(state="redis")
    upstream, gw = _serve(tmp_path, v, signer, states)
    try:
        before = states.commands("redis")
        assert _load(gw, variants.bearer(v, signer), requests=10) == {"ok": 10}
        assert states.commands("redis") - before >= 10, "a limited key's requests go through Redis"
    finally:
        gw.stop()
        upstream.stop()
        states.close()


def test_the_profile_difference_ranks_by_calls_then_own_time_per_request() -> None:
    from bench.variant_profile import differences

    this = {("a.py", 1, "verify"): (200, 0.004), ("b.py", 2, "relay"): (100, 1.0)}
    ref = {("b.py", 2, "relay"): (100, 0.999), ("c.py", 3, "gone"): (100, 0.0)}
    lines = differences(this, ref, requests=100, top=3)
    assert lines[0].split() == ["+40.00", "µs", "+2.00", "calls", "a.py:1(verify)"]
    assert lines[1].split() == ["+0.00", "µs", "-1.00", "calls", "c.py:3(gone)"]
    assert lines[2].split() == ["+10.00", "µs", "+0.00", "calls", "b.py:2(relay)"]
