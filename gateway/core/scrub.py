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
from typing import Any

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
    """`text` itself (the same object) when there is nothing to mask, so callers can test `is`."""
    original = text
    for key in sorted({k for k in keys if k}, key=len, reverse=True):
        if key in text:
            text = text.replace(key, _KEY_MARK)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + _BEARER_MARK, text)
    text = _secrets_rules().redact(text).text
    return original if text == original else text


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


# An error object is a few levels deep. A hostile one nested to orjson's parse limit (1,024) would
# overflow Python's stack here and orjson's encoder (255 levels) after: what lies deeper is dropped.
MAX_DEPTH = 64


def scrub_json(value: Any, keys: Iterable[str]) -> Any:
    """Every string in a parsed JSON value scrubbed, object member names included; the value itself
    (the same object) when nothing changed, else a copy that shares the unchanged parts. A container
    nested deeper than `MAX_DEPTH` becomes None."""
    return _walk(value, tuple(keys), MAX_DEPTH)


def _walk(value: Any, keys: tuple[str, ...], depth: int) -> Any:
    if isinstance(value, str):
        return scrub_text(value, keys)
    if isinstance(value, list | dict) and depth == 0:
        return None
    if isinstance(value, list):
        items = [_walk(v, keys, depth - 1) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        pairs = [(scrub_text(k, keys), _walk(v, keys, depth - 1)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value
