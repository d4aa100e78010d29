"""Secrets out of upstream-derived text, before it can reach a client byte or a log line (CONTRACT §5.3).

An upstream's error message may echo our own credentials back ("Incorrect API key provided: sk-...",
a proxy quoting the `Authorization` header it got). Every configured provider key is masked exactly
(the longest first, so a key that contains another is masked whole), then any `Bearer <token>`, then
whatever the built-in `secrets` redaction rules find. Pure: text in, text out.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import replace

from gateway.core.events import Failure
from gateway.core.redact.window import Redactor, mask_marker

_KEY_MARK = mask_marker("provider_key")
_BEARER_MARK = mask_marker("bearer_token")
# RFC 6750 §2.1: "Bearer" 1*SP b64token; we mask up to the next whitespace or quote, whatever it holds
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[^\s\"'<>]+")


@functools.cache
def _secrets_rules() -> Redactor:
    return Redactor.compile(["secrets"], [])


def scrub_text(text: str, keys: Iterable[str]) -> str:
    for key in sorted({k for k in keys if k}, key=len, reverse=True):
        if key in text:
            text = text.replace(key, _KEY_MARK)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + _BEARER_MARK, text)
    return _secrets_rules().redact(text).text


def _scrub_opt(text: str | None, keys: tuple[str, ...]) -> str | None:
    return None if text is None else scrub_text(text, keys)


def scrub_failure(failure: Failure, keys: Iterable[str]) -> Failure:
    """The failure with every upstream-derived text field scrubbed (message, code, type, param)."""
    ks = tuple(keys)
    message = scrub_text(failure.message, ks)
    code, type_, param = (_scrub_opt(v, ks) for v in (failure.code, failure.type, failure.param))
    if (message, code, type_, param) == (failure.message, failure.code, failure.type, failure.param):
        return failure
    return replace(failure, message=message, code=code, type=type_, param=param)
