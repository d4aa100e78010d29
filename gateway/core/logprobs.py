"""Logprobs through the text windows (redaction, stream guardrails), sans I/O: each token's entry goes out
with the piece of text that carries the token (docs/extensions.md, "Token lists go with masked text").

A window releases a text later than it came: it holds the unfinished word, and a candidate that may still
become a match. A delta's own tokens can therefore spell text its client-bound delta does not carry yet,
text the window may still mask: they never go out with that delta. `AlignedStage` wraps the stage of one
text whose first delta came with its tokens (`token_lengths`). It keeps the text the window released past
the last whole token and the entries of the tokens not given out yet, and gives out, per push, the
released text up to the end of the last token it completes, with exactly those tokens' entries. So a text
the window only delayed keeps its logprobs, each list spelling exactly the text it comes with (the text
then comes cut at token boundaries, not at the window's: the same text, in other pieces).

Sound by a check, not by counting on offsets: an entry goes out only with text the window released as it
came (compared with the upstream text pushed). A release that differs (a mask), a refusal, or a delta
without tokens gives out what was ready and the release with no entry, and drops the pending ones; the
stage is then out of step with its window until the window holds nothing (`held_chars == 0`): every text
pushed so far has been released, and the count starts again from there.

Bounded: the pending text is what the windows hold (at most `MAX_HELD_CHARS` each) and the released part
of one token; the pending entries are those texts' tokens. A stream without logprobs never gets here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core.stages import Refusal, TextStage


def token_lengths(entries: object, text: str) -> list[int] | None:
    """The lengths of the tokens of `entries` (a server's `logprobs` list for one delta) when they spell
    `text` exactly, one after the other; None for anything else (not a list, an entry without a string
    `token`, bytes written as escapes), whose entries cannot follow the text through a window."""
    if type(entries) is not list or not entries:
        return None
    tokens: list[str] = []
    for entry in entries:
        token = entry.get("token") if type(entry) is dict else None
        if type(token) is not str:
            return None
        tokens.append(token)
    return [len(t) for t in tokens] if "".join(tokens) == text else None


class AlignedStage:
    """A `TextStage` whose text came with its tokens. `push_tokens` / `flush_tokens` give out the released
    text and the entries that go with it (None: none can, the text goes out without them); `push` and
    `flush` are the stage's own (a delta without tokens, the end without them)."""

    __slots__ = ("_entries", "_inner", "_lens", "_more", "_ready", "_synced", "_text")

    def __init__(self, inner: TextStage) -> None:
        self._inner = inner
        self._text = ""  # upstream text pushed since the last piece given out ...
        self._more: list[str] = []  # ... and the deltas after it, joined when a release is checked
        self._ready = 0  # how much of it the window released as it came (not given out: inside a token)
        self._lens: list[int] = []  # the pending tokens' lengths, in order: together, the text exactly
        self._entries: list[Any] = []  # and their entries
        self._synced = inner.held_chars == 0  # in step with the window: the text starts where its held text does

    @property
    def held_chars(self) -> int:
        return self._inner.held_chars + self._ready

    @property
    def push_together(self) -> Callable[[list[str]], list[str]] | None:
        return None  # one delta at a time, through `push`: what is ready goes out before the next release

    def push(self, text: str) -> tuple[str, Refusal | None]:
        released, refusal = self._inner.push(text)
        return self._unaligned(released), refusal

    def push_tokens(self, text: str, lens: list[int], entries: list[Any]) -> tuple[str, list[Any] | None,
                                                                                   Refusal | None]:
        """`text` and its tokens (`token_lengths`, the entries): the text to give out and its tokens' entries."""
        released, refusal = self._inner.push(text)
        if not self._synced or refusal is not None:
            return self._unaligned(released), None, refusal
        self._more.append(text)
        self._lens += lens
        self._entries += entries
        if not released:
            return "", [], None
        if not self._joined().startswith(released, self._ready):  # masked: no entry spells what it became
            return self._unaligned(released), None, None
        self._ready += len(released)
        out, kept = self._take()
        return out, kept, None

    def flush(self) -> tuple[str, Refusal | None]:
        out, _, refusal = self.flush_tokens()
        return out, refusal

    def flush_tokens(self) -> tuple[str, list[Any] | None, Refusal | None]:
        """The end of the text: all that is left, with the entries of its tokens when it came as it was."""
        tail, refusal = self._inner.flush()
        if self._synced and refusal is None:
            pending = self._joined()
            if len(pending) == self._ready + len(tail) and pending.startswith(tail, self._ready):
                kept = self._entries
                self._text, self._ready, self._lens, self._entries = "", 0, [], []
                return pending, kept, None
        return self._unaligned(tail), None, refusal

    def _joined(self) -> str:
        if self._more:
            self._text = "".join([self._text, *self._more])
            self._more.clear()
        return self._text

    def _take(self) -> tuple[str, list[Any]]:
        """The ready text up to the end of the last token it completes, and those tokens' entries."""
        ready, cut, n = self._ready, 0, 0
        for length in self._lens:
            if cut + length > ready:
                break
            cut += length
            n += 1
        if not n:
            return "", []
        out, self._text = self._text[:cut], self._text[cut:]
        kept = self._entries[:n]
        del self._entries[:n]
        del self._lens[:n]
        self._ready -= cut
        return out, kept

    def _unaligned(self, released: str) -> str:
        """A release no entry can go with: what was ready goes out before it, the pending entries are
        dropped, and the stage is in step again only once its window holds nothing."""
        out = self._joined()[:self._ready] + released if self._ready else released
        self._text, self._ready, self._lens, self._entries = "", 0, [], []
        self._more.clear()
        self._synced = self._inner.held_chars == 0
        return out
