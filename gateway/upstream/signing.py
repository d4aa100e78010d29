"""Providers whose requests are signed with credentials the gateway keeps fresh: AWS SigV4 (`bedrock`),
a Google OAuth2 bearer (`vertex`). A `Signer` per configured provider of such a type, started with the
app (its first credentials, then refreshes off the request path) and swapped on reload; `Upstream.open`
signs each request last, after every header is set, so the signature covers what is sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Protocol

import structlog

from gateway.config.types import ProviderConfig

log = structlog.get_logger("gateway")


class Signer(Protocol):
    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes) -> None:
        """Add the credentials to `headers` in place. Never blocks: it reads the credentials in hand.
        Raises `UpstreamError` (UPSTREAM_AUTH) when it has none."""

    async def start(self) -> None:
        """The first credentials (a failure is logged; the signer keeps trying), and the refresh."""

    async def close(self) -> None: ...


SignerFactory = Callable[[ProviderConfig], Signer]
# a provider type's auth kind (`providers.registry.ProviderKind.auth`) -> its signer; each signer's
# module adds itself
SIGNERS: dict[str, SignerFactory] = {}


async def start_signers(providers: Mapping[str, ProviderConfig], auth_of: Callable[[str], str]) -> dict[str, Signer]:
    """A started signer per provider whose type signs (`auth_of(type)` names its kind, "" for none)."""
    signers: dict[str, Signer] = {}
    for name, cfg in providers.items():
        kind = auth_of(cfg.type)
        if kind:
            signer = SIGNERS[kind](cfg)
            await signer.start()
            signers[name] = signer
    return signers


async def close_signers(signers: Mapping[str, Signer]) -> None:
    for signer in signers.values():
        with contextlib.suppress(Exception):
            await signer.close()
