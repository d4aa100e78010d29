"""AWS SigV4 request signing for `bedrock` providers (docs/cloud-providers.md), with botocore: the default credential
chain (environment, shared config and credentials files with `AWS_PROFILE`, web identity as on EKS,
container credentials, instance metadata), keys from the config, and `role_arn` assumed through STS.

Credentials are resolved and refreshed in a worker thread, never on the event loop (botocore's chain
does blocking HTTP: IMDS, STS, the container endpoint). The thread refreshes every `refresh_every_s`;
botocore's refreshable credentials fetch new ones once they are within its advisory window of their
expiry (15 minutes), so a request never waits for a refresh and never signs with expired keys while
the source answers. `sign` reads the frozen credentials in hand: no I/O, no lock. Each set taken
(key id, secret, session token) is handed to the scrubber before `sign` can use it (`signing.MintedCredentials`).

botocore is imported here only when a `bedrock` provider is configured (`pip install llm-gateway[aws]`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from gateway.core.events import Failure, FailureKind
from gateway.providers.settings import AwsSettings, ProviderConfig
from gateway.upstream.errors import UpstreamError
from gateway.upstream.signing import DISCARD, SIGNERS, CredentialSink, keep_s

log = structlog.get_logger("gateway")

SERVICE = "bedrock"  # the SigV4 signing name of Bedrock Runtime
ROLE_SESSION_NAME = "llm-gateway"
# the headers SigV4 adds: copied back into the request's own headers after signing
_SIGNED = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token")


def resolve_credentials(aws: AwsSettings) -> Any:
    """botocore credentials for the settings (blocking: call it in a thread). A refreshable object for
    the chain's temporary credentials and for an assumed role; None when the chain finds none."""
    import botocore.credentials  # type: ignore[import-untyped]
    import botocore.session  # type: ignore[import-untyped]

    session = botocore.session.Session()
    session.set_config_variable("region", aws.region)  # STS (web identity, assume role) in our region
    if aws.access_key_id and aws.secret_access_key:
        base = botocore.credentials.Credentials(aws.access_key_id, aws.secret_access_key, aws.session_token)
    else:
        base = session.get_credentials()
    if base is None or not aws.role_arn:
        return base
    fetcher = botocore.credentials.AssumeRoleCredentialFetcher(
        client_creator=session.create_client, source_credentials=base, role_arn=aws.role_arn,
        extra_args={"RoleSessionName": ROLE_SESSION_NAME})
    return botocore.credentials.DeferredRefreshableCredentials(
        refresh_using=fetcher.fetch_credentials, method="assume-role")


class SigV4Signer:
    """`upstream.signing.Signer` for auth kind "sigv4": one per `bedrock` provider."""

    def __init__(self, provider: ProviderConfig, minted: CredentialSink | None = None,
                 refresh_every_s: float = 60.0) -> None:
        self.name = provider.name
        self.aws = provider.aws or AwsSettings()
        self.refresh_every_s = refresh_every_s
        self._minted = minted if minted is not None else DISCARD
        self._keep_s = keep_s(provider)
        self._source: Any = None  # botocore credentials (refreshable or not), resolved in a thread
        self._frozen: Any = None  # botocore ReadOnlyCredentials: what `sign` reads
        self._task: asyncio.Task[None] | None = None
        self.refreshes = 0  # completed refresh passes (tests and logs)

    @property
    def access_key_id(self) -> str | None:
        """The key id in use (it names the credentials in AWS logs; never the secret)."""
        return self._frozen.access_key if self._frozen is not None else None

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.ensure_future(self._refresh_loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._minted.release(self, self._keep_s)

    async def refresh(self) -> None:
        """One pass, in a thread: resolve the chain if it found nothing yet, then take the current frozen
        credentials (botocore refreshes them first when they are near expiry). A failure keeps the
        credentials in hand and is logged (its kind only: never a key, never the source's text)."""
        try:
            frozen = await asyncio.to_thread(self._current)
        except Exception as exc:  # botocore's credential errors have no common base worth naming
            log.warning("aws_credentials_failed", provider=self.name, error=type(exc).__name__)
        else:
            if frozen is not None:  # masked before any request is signed with them
                values = (frozen.access_key, frozen.secret_key, frozen.token)
                self._minted.hold(self, [v for v in values if v], self._keep_s)
            self._frozen = frozen
        self.refreshes += 1

    def _current(self) -> Any:
        if self._source is None:
            self._source = resolve_credentials(self.aws)
            if self._source is None:
                log.warning("aws_credentials_missing", provider=self.name)
                return None
        return self._source.get_frozen_credentials()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_every_s)
            await self.refresh()

    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes) -> None:
        creds = self._frozen
        if creds is None:
            raise UpstreamError(Failure(FailureKind.UPSTREAM_AUTH, f"{self.name}: no AWS credentials"))
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]

        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        SigV4Auth(creds, SERVICE, self.aws.region).add_auth(request)
        for name in _SIGNED:
            value = request.headers.get(name)
            if value is not None:
                headers[name.lower()] = value


SIGNERS["sigv4"] = SigV4Signer
