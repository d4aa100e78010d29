"""Providers whose requests are signed with credentials the gateway keeps fresh: AWS SigV4 (`bedrock`),
a Google OAuth2 bearer (`vertex`). A `Signer` per configured provider of such a type, started with the
app (its first credentials, then refreshes off the request path) and swapped on reload; `Upstream.open`
signs each request last, after every header is set, so the signature covers what is sent.

Every credential a signer gets joins the process's `MintedCredentials` before it signs anything, so the
scrubber masks it in every upstream failure text (docs/extensions.md, "secrets in upstream texts").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.parse
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Protocol

import structlog

from gateway.config.types import ProviderConfig
from gateway.core.minted import MintedSecrets

log = structlog.get_logger("gateway")


class Signer(Protocol):
    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes) -> None:
        """Add the credentials to `headers` in place. Never blocks: it reads the credentials in hand.
        Raises `UpstreamError` (UPSTREAM_AUTH) when it has none."""

    async def start(self) -> None:
        """The first credentials (a failure is logged; the signer keeps trying), and the refresh."""

    async def close(self) -> None: ...


class CredentialSink(Protocol):
    """What a signer tells the scrubber: the credentials it signs with, as soon as it has them."""

    def hold(self, owner: Hashable, values: Iterable[str], keep_s: float, expires_at: float | None = None) -> None:
        """`owner` signs with `values` from now on (until `expires_at`, monotonic, when they have one);
        what it held before stays masked `keep_s` more."""

    def release(self, owner: Hashable, keep_s: float) -> None:
        """`owner` stopped: what it held stays masked `keep_s` more."""


class SignerFactory(Protocol):
    def __call__(self, provider: ProviderConfig, minted: CredentialSink | None = None) -> Signer: ...


# a provider type's auth kind (`providers.registry.ProviderKind.auth`) -> its signer; each signer's
# module adds itself
SIGNERS: dict[str, SignerFactory] = {}
KEEP_MARGIN_S = 30.0  # past `total_s`: the end of an answer cut at its deadline is still being read


def keep_s(provider: ProviderConfig) -> float:
    """How long a replaced credential of `provider` stays masked: an answer to a request signed with it
    may come until the attempt's `timeouts.total_s` (docs/reference.md) ends it."""
    return provider.timeouts.total_s + KEEP_MARGIN_S


class MintedCredentials:
    """The process's signer credentials (`core.minted.MintedSecrets`, which the scrubber reads), with
    the clock and one timer that drops each set at its deadline. Used on the event loop's thread."""

    def __init__(self) -> None:
        self.secrets = MintedSecrets()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._closed = False

    def hold(self, owner: Hashable, values: Iterable[str], keep_s: float, expires_at: float | None = None) -> None:
        self.secrets.hold(owner, _quoted_too(values), time.monotonic(), keep_s, expires_at)
        self._arm()

    def release(self, owner: Hashable, keep_s: float) -> None:
        self.secrets.release(owner, time.monotonic(), keep_s)
        self._arm()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()

    def _prune(self) -> None:
        self._timer = self._timer_at = None
        self.secrets.prune(time.monotonic())
        self._arm()

    def _arm(self) -> None:
        at = self.secrets.next_deadline()
        if self._closed or at is None or (self._timer_at is not None and self._timer_at <= at):
            return
        if self._timer is not None:
            self._timer.cancel()
        # a delay, not `call_at`: uvloop's clock is not `time.monotonic`; a timer a millisecond early
        # finds nothing to drop and arms again
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_later(max(0.0, at - time.monotonic()), self._prune)


def _quoted_too(values: Iterable[str]) -> Iterator[str]:
    """Each value, and its percent-encoded form when that differs (a session token's `/`, `+`, `=`
    quoted in a URL an upstream echoes)."""
    for value in values:
        yield value
        quoted = urllib.parse.quote(value, safe="")
        if quoted != value:
            yield quoted


class _Discard:
    """The sink of a signer built on its own (tests, tools): nothing to scrub for."""

    def hold(self, owner: Hashable, values: Iterable[str], keep_s: float, expires_at: float | None = None) -> None:
        pass

    def release(self, owner: Hashable, keep_s: float) -> None:
        pass


DISCARD: CredentialSink = _Discard()


async def start_signers(providers: Mapping[str, ProviderConfig], auth_of: Callable[[str], str],
                        minted: CredentialSink | None = None) -> dict[str, Signer]:
    """A started signer per provider whose type signs (`auth_of(type)` names its kind, "" for none), each
    telling `minted` the credentials it gets."""
    signers: dict[str, Signer] = {}
    for name, cfg in providers.items():
        kind = auth_of(cfg.type)
        if kind:
            signer = SIGNERS[kind](cfg, minted)
            await signer.start()
            signers[name] = signer
    return signers


async def close_signers(signers: Mapping[str, Signer]) -> None:
    for signer in signers.values():
        with contextlib.suppress(Exception):
            await signer.close()
