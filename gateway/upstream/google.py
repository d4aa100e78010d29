"""The Google OAuth2 bearer signer (`ProviderKind.auth == "google"`: provider type `vertex`).

Credentials come from google-auth: the provider's `credentials_file` (a service account key, an
authorized user's or a workload identity federation JSON), else Application Default Credentials
(`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's ADC file, the metadata server on GCE / GKE workload
identity). google-auth does blocking HTTP to get a token, so every load and refresh runs in a thread
(`asyncio.to_thread`), never on the loop; a background task refreshes the token ahead of its expiry, so
`sign` only reads the token in hand. Each token is handed to the scrubber before `sign` can use it,
and leaves it after its expiry or its replacement (`signing.MintedCredentials`). google-auth is imported
lazily: only a configured `vertex` provider needs it (`pip install llm-gateway[gcp]`).

Never logged: the token, the file's contents. A failure is logged by its exception's type only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import time
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.config.types import ProviderConfig
from gateway.core.events import Failure, FailureKind
from gateway.upstream.errors import UpstreamError
from gateway.upstream.signing import DISCARD, SIGNERS, CredentialSink, keep_s

log = structlog.get_logger("gateway")

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
REFRESH_AHEAD_S = 300.0  # refresh this long before the token expires (Google's tokens live an hour)
MIN_DELAY_S = 1.0
START_WAIT_S = 10.0  # the longest the gateway's start waits for a first token
RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # after a failed refresh, while the old token may still work


def refresh_delay(remaining_s: float | None) -> float:
    """How long to wait before the next refresh, for a token that expires in `remaining_s` (None: a
    token without expiry; check again in an hour). A short-lived token is renewed halfway through its life."""
    if remaining_s is None:
        return 3600.0
    return max(MIN_DELAY_S, remaining_s - REFRESH_AHEAD_S, remaining_s / 2)


def _remaining_s(credentials: Any) -> float | None:
    expiry = getattr(credentials, "expiry", None)
    if not isinstance(expiry, datetime.datetime):
        return None
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # google-auth's expiry is naive UTC
    return (expiry.replace(tzinfo=None) - now).total_seconds()


def _load(credentials_file: str | None) -> Any:
    """The credentials, not yet refreshed (blocking: in a thread)."""
    import google.auth  # lazily: only a configured vertex provider needs google-auth

    if credentials_file:
        return _from_file(credentials_file)
    credentials, _ = google.auth.default(scopes=list(SCOPES))
    return credentials


def _from_file(path: str) -> Any:
    """`credentials_file` by its `type`, each with its own loader (google-auth's generic loader is
    deprecated: it would accept any type a file names)."""
    with open(path, "rb") as fh:
        info = json.loads(fh.read())
    kind = info.get("type") if isinstance(info, dict) else None
    scopes = list(SCOPES)
    if kind == "service_account":
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_info(info, scopes=scopes)  # type: ignore[no-untyped-call]
    if kind == "authorized_user":  # `gcloud auth application-default login`
        from google.oauth2 import credentials

        return credentials.Credentials.from_authorized_user_info(info, scopes=scopes)  # type: ignore[no-untyped-call]
    if kind == "external_account":  # workload identity federation
        source = info.get("credential_source")
        if isinstance(source, dict) and str(source.get("environment_id", "")).startswith("aws"):
            from google.auth import aws

            return aws.Credentials.from_info(info, scopes=scopes)  # type: ignore[no-untyped-call]
        from google.auth import identity_pool

        return identity_pool.Credentials.from_info(info, scopes=scopes)  # type: ignore[no-untyped-call]
    raise ValueError(f"credentials_file: unsupported credentials type {kind!r}")


def _refresh(credentials: Any) -> None:
    """A new access token (blocking: in a thread)."""
    import google.auth.transport.requests

    credentials.refresh(google.auth.transport.requests.Request())


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    expires_at: float | None  # time.monotonic() deadline; None: the credentials named no expiry
    quota_project: str | None  # billed project for user credentials (`x-goog-user-project`)


class GoogleSigner:
    """One per `vertex` provider: `authorization: Bearer <token>` on each request."""

    def __init__(self, provider: ProviderConfig, minted: CredentialSink | None = None) -> None:
        self.provider = provider
        self._minted = minted if minted is not None else DISCARD
        self._keep_s = keep_s(provider)
        self._credentials: Any = None
        self._token: _Token | None = None
        self._task: asyncio.Task[None] | None = None
        self._first = asyncio.Event()  # the first fetch has ended, well or not
        self.refreshes = 0  # tokens obtained so far (tests and logs)

    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes) -> None:
        token = self._token
        if token is None or (token.expires_at is not None and time.monotonic() >= token.expires_at):
            # an expired token would only earn a 401: the next deployment serves instead, at once
            raise UpstreamError(Failure(FailureKind.UPSTREAM_AUTH, f"{self.provider.name}: no valid Google token"))
        headers["authorization"] = f"Bearer {token.value}"
        if token.quota_project:
            headers["x-goog-user-project"] = token.quota_project

    async def start(self) -> None:
        """The refresh task, and a bounded wait for its first token: a metadata server that does not
        answer must not hold the gateway's start (the task keeps trying)."""
        self._task = asyncio.ensure_future(self._refresh_loop())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(START_WAIT_S):
                await self._first.wait()

    async def refresh(self) -> float:
        """A new token now (the credentials are loaded the first time); the delay until the next one."""
        if self._credentials is None:
            self._credentials = await asyncio.to_thread(_load, self.provider.credentials_file)
        credentials = self._credentials
        await asyncio.to_thread(_refresh, credentials)
        value = getattr(credentials, "token", None)
        if not isinstance(value, str) or not value:
            raise ValueError("the credentials gave no token")
        remaining = _remaining_s(credentials)
        quota = getattr(credentials, "quota_project_id", None)
        expires_at = time.monotonic() + remaining if remaining is not None else None
        self._minted.hold(self, (value,), self._keep_s, expires_at)  # masked before any request carries it
        self._token = _Token(value, expires_at, quota if isinstance(quota, str) and quota else None)
        self.refreshes += 1
        return refresh_delay(remaining)

    async def _refresh_loop(self) -> None:
        failures = 0
        while True:
            try:
                delay = await self.refresh()
                failures = 0
            except Exception as exc:  # any failure of the library: logged, retried; a token in hand stays
                self._log_failure(exc)
                delay = RETRY_S[min(failures, len(RETRY_S) - 1)]
                failures += 1
            self._first.set()
            await asyncio.sleep(delay)

    def _log_failure(self, exc: Exception) -> None:
        # the exception's type only: google-auth's messages may quote a token endpoint's answer
        log.warning("google_credentials_failed", provider=self.provider.name, error=type(exc).__name__)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._minted.release(self, self._keep_s)


SIGNERS["google"] = GoogleSigner
