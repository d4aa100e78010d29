"""`rediss://` with `state.redis_ca_file` and an ACL user: a real redis-server with TLS on loopback and a
private CA (docs/scale-out.md). Without the CA, or with a wrong password, the backend counts locally."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from gateway.config.types import CacheConfig, StateConfig
from gateway.state.base import create_backend
from tests.ports import free_port
from tests.redis_server import RedisServer

NOW = 1_700_000_000.0


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    tls_port = free_port()
    args = ("--tls-port", str(tls_port), "--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file),
            "--tls-ca-cert-file", str(ca_file), "--tls-auth-clients", "no",
            "--user", "gateway", "on", ">s3cret-acl", "~llmgw:*", "+@all")
    with RedisServer(extra_args=args):
        yield tls_port, ca_file


def state(port: int, password: str, ca_file: Path | None) -> StateConfig:
    return StateConfig(backend="redis", redis_url=f"rediss://gateway:{password}@127.0.0.1:{port}/0",
                       redis_ca_file=str(ca_file) if ca_file else None, timeout_ms=2000)


@pytest.mark.parametrize(("password", "with_ca", "shared"),
                         [("s3cret-acl", True, True), ("s3cret-acl", False, False), ("wrong", True, False)])
async def test_rediss_with_a_private_ca_and_an_acl_user(tls_redis: tuple[int, Path], password: str,
                                                        with_ca: bool, shared: bool) -> None:
    port, ca_file = tls_redis
    modes: list[bool] = []
    backend = create_backend(state(port, password, ca_file if with_ca else None), CacheConfig(),
                             lambda _reason: None, modes.append)
    try:
        _, reservation = await backend.check_request("team-a", 5, 100, 10, NOW)
        await backend.add_spend("team-a", "day", 0.25, NOW)
        assert reservation is not None and reservation.shared is shared
        assert modes == ([] if shared else [True])
        assert await backend.spend("team-a", "day", NOW) == 0.25
    finally:
        await backend.close()
