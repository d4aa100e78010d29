"""Texts as a big message brings them (`core.json_body.JsonText`): the literal kept beside the text."""

from __future__ import annotations

from gateway.core.json_body import JsonText


def literal_of(text: str) -> JsonText:
    """`text` with its literal spelled in escapes orjson would not write (`\\u` for every BMP character),
    so that a count or an encoding that used the text instead of its literal would differ."""
    value = JsonText(text)
    value.json = b'"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in text).encode() + b'"'
    return value
