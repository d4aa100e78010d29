"""Mid-stream continuation (docs/continuation.md), sans I/O: the request that continues an answer, and how the
continuing attempt's text joins the text the client already has.

Two ways to continue. **Prefill**: the original request plus the text so far as a trailing assistant
message; the deployment writes what comes next. The prefill leaves out the text's trailing whitespace
(Anthropic rejects an assistant prefill that ends with it), so the continuation may begin by writing
that whitespace again: it is dropped once. **Regenerate**: the original request as it was; the new
answer is held until it has reproduced the text so far exactly, then the rest goes on; anything else is
a divergence, and the stream ends as it would have without continuation.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from gateway.core.events import Usage


class Mode(StrEnum):
    PREFILL = "prefill"
    REGENERATE = "regenerate"


class Diverged(Exception):
    """The regenerated answer is not the one the client has been reading."""


def prefill_text(text: str) -> str:
    """The text as a prefill: without trailing whitespace. "" when nothing is left to prefill."""
    return text.rstrip()


def prefill_messages(body: dict[str, Any], text: str) -> dict[str, Any]:
    """A Chat Completions or Messages request with `text` as the answer's beginning: a trailing assistant
    message. A request that already ends with one (the client's own prefill) has the text appended to
    it: the answer the client reads continues that message."""
    messages = list(body.get("messages") or [])
    last = messages[-1] if messages else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        content = last.get("content")
        if isinstance(content, str):
            messages[-1] = {**last, "content": content + text}
            return {**body, "messages": messages}
        if isinstance(content, list):
            messages[-1] = {**last, "content": [*content, {"type": "text", "text": text}]}
            return {**body, "messages": messages}
    messages.append({"role": "assistant", "content": text})
    return {**body, "messages": messages}


def prefill_input(body: dict[str, Any], text: str) -> dict[str, Any]:
    """A Responses request with `text` as the answer's beginning: an assistant output message item
    after its input (a string input becomes the user message it stands for)."""
    given = body.get("input")
    items: list[Any] = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
    return {**body, "input": items}


class Seam:
    """Where the continuing attempt's content joins the client's text: `feed` each content delta, write
    what it returns; `end` when the attempt finished.

    Regenerate: `expect` is the whole text so far, to be reproduced exactly before anything is released.
    Prefill: `expect` is the whitespace the prefill left out, which the continuation may write again."""

    __slots__ = ("_expect", "_held", "strict")

    def __init__(self, mode: Mode, text: str) -> None:
        self.strict = mode is Mode.REGENERATE
        self._expect = text if self.strict else text[len(prefill_text(text)):]
        self._held = 0  # how much of `expect` the continuation has written so far

    @property
    def joined(self) -> bool:
        """The continuation is past the text the client has: what comes now is new."""
        return self._held >= len(self._expect)

    def feed(self, text: str) -> str:
        """The part of `text` the client has not read yet. Raises `Diverged` (regenerate only)."""
        expect, held = self._expect, self._held
        if held >= len(expect):
            return text
        n = min(len(text), len(expect) - held)
        if text[:n] == expect[held:held + n]:
            self._held = held + n
            return text[n:]
        if self.strict:
            raise Diverged
        k = 0  # prefill: the whitespace it wrote again, as far as it matches; then it is past the seam
        while k < n and text[k] == expect[held + k]:
            k += 1
        self._held = len(expect)
        return text[k:]

    def other_output(self) -> None:
        """Output that is not content (a tool call) came: before the join, a regenerated answer took
        another turn."""
        if self.strict and not self.joined:
            raise Diverged

    def end(self) -> None:
        """The continuation finished: a regenerated answer that ended before the join diverged."""
        if self.strict and not self.joined:
            raise Diverged


def add_usage(a: Usage | None, b: Usage | None) -> Usage | None:
    """Two attempts' token counts, field by field (either may be missing: the upstream reported none)."""
    if a is None or b is None:
        return a if b is None else b
    return Usage(a.input + b.input, a.output + b.output, a.cached_input + b.cached_input,
                 a.cache_creation_input + b.cache_creation_input, a.reasoning + b.reasoning,
                 a.cache_creation_input_1h + b.cache_creation_input_1h)
