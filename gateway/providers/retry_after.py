"""An upstream's Retry-After: read from its headers, and merged into the failure its error classified to
(every provider type's HTTP error classification ends with it)."""

from __future__ import annotations

import dataclasses
import email.utils
import time
from collections.abc import Mapping

from gateway.core.events import Failure


def retry_after_s(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """`retry-after-ms` (OpenAI, Azure) or `Retry-After` in seconds or as an HTTP date (RFC 9110 §10.2.3).
    `headers` must have lower-case keys."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def with_retry_after(failure: Failure, headers: Mapping[str, str]) -> Failure:
    """`failure` with the headers' wait, unless its error already said how long to wait (Google's
    `RetryInfo`): the body's figure is the upstream's more precise one."""
    wait = retry_after_s(headers)
    if wait is None or failure.retry_after_s is not None:
        return failure
    return dataclasses.replace(failure, retry_after_s=wait)
