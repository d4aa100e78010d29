"""The Messages stream's per-event fast path, sans I/O: text and thinking deltas read from their bytes.

Almost every event of an answer is one `content_block_delta` carrying a `text_delta` (or a
`thinking_delta`), which Anthropic writes compactly and always alike:

    event: content_block_delta
    data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

`text_delta` recognises that frame by its bytes and reads only the JSON string at its end, so a read of
many deltas costs no event objects, no dict per event and no re-encoding when the window releases the
text as it came (the frame is forwarded as the upstream's own bytes). Anything else — another event, a
delta with more fields, spaces, an `id:` line, a CR — is not recognised and takes the general path
(`MessagesStream._relay`), which gives the same client bytes.
"""

from __future__ import annotations

import orjson

from gateway.core.events import DeltaKind

_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_HEAD_LEN = len(_HEAD)
_MIDS = ((b',"delta":{"type":"text_delta","text":', DeltaKind.CONTENT),
         (b',"delta":{"type":"thinking_delta","thinking":', DeltaKind.REASONING))
_TAIL = b'"}}'
# the whole head up to the text's opening quote, for the first blocks: one slice and one dict lookup
_KNOWN: dict[bytes, tuple[int, DeltaKind]] = {_HEAD + str(i).encode() + mid: (i, kind)
                                              for mid, kind in _MIDS for i in range(10)}
_TEXT_AT, _THINKING_AT = len(_HEAD) + 1 + len(_MIDS[0][0]), len(_HEAD) + 1 + len(_MIDS[1][0])


def text_delta(frame: bytes) -> tuple[int, DeltaKind, str] | None:
    """(block index, kind, text) of one event's frame (without its blank line), or None."""
    if not frame.endswith(_TAIL):
        return None
    at = _TEXT_AT
    known = _KNOWN.get(frame[:at])
    if known is None:
        at = _THINKING_AT
        known = _KNOWN.get(frame[:at])
    if known is not None:
        try:
            text = orjson.loads(frame[at:-2])
        except orjson.JSONDecodeError:
            return None  # more after the text: not the compact shape
        return (known[0], known[1], text) if type(text) is str and text else None
    return _any_index(frame)


def _any_index(frame: bytes) -> tuple[int, DeltaKind, str] | None:
    """The same for a block index of more than one digit."""
    if not frame.startswith(_HEAD):
        return None
    for mid, kind in _MIDS:
        at = frame.find(mid, _HEAD_LEN, _HEAD_LEN + 12 + len(mid))  # an index of up to 12 digits
        if at < 0:
            continue
        index = frame[_HEAD_LEN:at]
        if not index.isdigit():
            return None
        try:
            text = orjson.loads(frame[at + len(mid):-2])
        except orjson.JSONDecodeError:
            return None  # more after the text: not the compact shape
        if type(text) is not str or not text:
            return None
        return int(index), kind, text
    return None


def encode_text_delta(index: int, kind: DeltaKind, text: str) -> bytes:
    """A delta whose text the window changed (masked, or released in part)."""
    dtype, field = ("text_delta", "text") if kind is DeltaKind.CONTENT else ("thinking_delta", "thinking")
    obj = {"type": "content_block_delta", "index": index, "delta": {"type": dtype, field: text}}
    return b"event: content_block_delta\ndata: " + orjson.dumps(obj) + b"\n\n"
