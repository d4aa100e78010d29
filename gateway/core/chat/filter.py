"""Rewrite client-bound chat chunks through the text windows (redaction, stream guardrails), sans I/O.

One window chain per (choice, text kind): text is pushed as it arrives and only what the chain releases
is written. A chunk whose text is entirely held, and that carries nothing else, is dropped; a choice's
finish chunk carries whatever its windows still held. A chunk the filter did not change is forwarded
as the upstream's own bytes (no re-serialisation on the hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.core.chat.wire import REASONING_DETAILS, TEXT_FIELDS, content_only, detail_texts
from gateway.core.events import DeltaKind
from gateway.core.logprobs import AlignedStage, token_lengths
from gateway.core.sse import encode_data
from gateway.core.stages import Refusal, StageFactory, TextStage, refused

_KIND_OF = dict(TEXT_FIELDS)
_CONTENT = "content"
# the `logprobs` list of a text field's tokens: `refusal` its own, the others `content` (vLLM lists a
# reasoning delta's tokens there)
_LIST_OF = {"content": "content", "reasoning_content": "content", "reasoning": "content", "refusal": "refusal"}
Tokens = dict[str, list[Any] | None]  # per text field of a choice: the entries that go with its text (None: none)


def _unchanged(texts: list[str]) -> list[str]:
    return texts


class ChatOutputFilter:
    """Per request. `apply` returns the SSE bytes to write for one upstream chunk (b"" to drop it)."""

    __slots__ = ("_aligned", "_base", "_details", "_emptied", "_factory", "_forward_usage", "_stages",
                 "output_released", "refusal")

    def __init__(self, factory: StageFactory | None, forward_usage: bool) -> None:
        self._factory = factory
        self._forward_usage = forward_usage
        # a window per (choice, text field): both spellings of the reasoning (`reasoning_content`,
        # `reasoning`) are the same text when a server sends both, each masked as a body's field is
        self._stages: dict[tuple[int, str], TextStage | None] = {}
        # a window per text of a `reasoning_details` entry, by (choice, entry index, field), and the entry's type
        self._details: dict[tuple[int, int, str], tuple[TextStage | None, object]] = {}
        self._base: dict[str, Any] = {}
        self.refusal: Refusal | None = None  # set once a stage refuses; nothing more is released
        self.output_released = False  # an output token has left the filter (the TTFT moment)
        self._emptied = False  # this chunk had a text field held back whole
        self._aligned = False  # a text's stage is an `AlignedStage` (its first delta came with its tokens)

    @property
    def active(self) -> bool:
        return self._factory is not None

    def apply(self, obj: dict[str, Any] | None, raw: bytes | None, has_token: bool = False) -> bytes:
        """`has_token`: the upstream chunk carried an output token (before filtering)."""
        if obj is None or refused(self.refusal):  # not `self.refusal is not None`: see `refused`
            return b""
        choices = obj.get("choices")
        if not choices and obj.get("usage") is not None and not self._forward_usage:
            return b""  # the usage chunk the gateway asked for, not the client (docs/extensions.md, "Streams")
        if not self._base:
            self._base = {k: obj[k] for k in ("id", "object", "created", "model") if k in obj}
        if self._factory is not None:
            text = content_only(obj)
            if text:
                return self._apply_content(obj, raw, text, has_token)
        changed = self._emptied = False
        if self._factory is not None and isinstance(choices, list):
            for pos, choice in enumerate(choices):
                if isinstance(choice, dict):
                    changed |= self._filter_choice(choice, pos)
            if self._emptied and self._is_empty(obj):
                return b""
        if has_token and not self.output_released:
            self.output_released = not changed or _has_output(obj)
        if not changed and raw is not None:
            return encode_data(raw)
        return encode_data(orjson.dumps(obj))

    def release_content(self, index: int, text: str) -> str:
        """What the windows release for content `text` of choice `index` ("" when all is held or a
        stage has refused); the caller writes it in the chunk's place."""
        if self.refusal is not None:
            return ""
        # Called once per content delta: the stage's own lookup, inlined (no `_stage` call once
        # the stage exists; without a factory `_stages` stays empty and there is no stage).
        try:
            stage = self._stages[(index, _CONTENT)]
        except KeyError:
            stage = self._stage(index, _CONTENT) if self._factory is not None else None
        if stage is None:
            released = text
        else:
            released, refusal = stage.push(text)
            if refusal is not None:
                self.refusal = refusal
        if released:
            self.output_released = True
        return released

    def content_push(self, index: int) -> Callable[[list[str]], list[str]] | None:
        """For the relay's loop over one read: the content deltas of choice `index` that arrived
        together -> what each releases, when nothing can refuse them (no stage, or a redaction window
        alone); else None (call `release_content` per delta; so too for a text whose tokens follow it,
        `AlignedStage`, so that what it holds for a token goes out before the next release). The caller
        sets `output_released` once it writes released text."""
        if self.refusal is not None:
            return None
        if self._factory is None:
            return _unchanged
        stage = self._stage(index, _CONTENT)
        return _unchanged if stage is None else stage.push_together

    def _apply_content(self, obj: dict[str, Any], raw: bytes | None, text: str, has_token: bool) -> bytes:
        """Fast path: one choice, content only (see `content_only`)."""
        choice = obj["choices"][0]
        released = self._push(choice.get("index", 0), _CONTENT, text)
        if not released:
            return b""  # held whole, and the chunk carries nothing else
        self.output_released = self.output_released or has_token
        if released == text and raw is not None:
            return encode_data(raw)
        choice["delta"]["content"] = released
        return encode_data(orjson.dumps(obj))

    def _filter_choice(self, choice: dict[str, Any], pos: int) -> bool:
        index = choice.get("index", pos)
        index = index if isinstance(index, int) else pos
        delta = choice.get("delta")
        logprobs = choice.get("logprobs")
        one = _token_list(delta, logprobs) if logprobs else None
        # what each text of the choice releases here comes with (only where tokens can follow a text)
        tokens: Tokens | None = {} if logprobs or self._aligned else None
        changed = False
        if isinstance(delta, dict) and delta:
            for field in _KIND_OF:
                text = delta.get(field)
                if isinstance(text, str) and text:
                    if one is not None and one[0] == field:
                        released, kept = self._push_tokens(index, field, text, one[1], one[2])
                        changed |= kept is not one[2]
                    else:
                        released, kept = self._push(index, field, text), None
                    if tokens is not None:
                        tokens[field] = kept
                    if released != text:
                        delta[field] = released
                        changed = True
                        self._emptied |= not released
            if REASONING_DETAILS in delta:
                changed |= self._filter_details(index, delta[REASONING_DETAILS])
        if choice.get("finish_reason"):
            changed |= self._add_tails(choice, index, tokens)
        if changed:
            if tokens is None:
                empty_logprobs(choice)
            else:
                _set_logprobs(choice, tokens)
        return changed

    def _add_tails(self, choice: dict[str, Any], index: int, tokens: Tokens | None) -> bool:
        """A finishing choice carries what its windows still held (and, for a text whose tokens follow it,
        their entries, in `tokens`)."""
        tails = self._flush_choice(index, tokens)
        if not tails:
            return False
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = choice["delta"] = {}
        for field, tail in tails.items():
            if isinstance(tail, list):
                have = delta.get(field)
                delta[field] = (have if isinstance(have, list) else []) + tail
            else:
                delta[field] = (delta.get(field) or "") + tail
        return True

    def _filter_details(self, index: int, details: Any) -> bool:
        """The texts of a `reasoning_details` list (OpenRouter), each through a window of its own, as the
        `reasoning` beside it: the same text, which would otherwise reach the client unmasked."""
        changed = False
        for at, entry, field in detail_texts(details):
            key = (index, at, field)
            slot = self._details.get(key)
            if slot is None:  # the entry's first text: its window, and its type for the tail's entry
                stage = self._factory(DeltaKind.REASONING) if self._factory is not None else None
                self._details[key] = (stage, entry.get("type"))
            else:
                stage = slot[0]
            if stage is None:
                continue
            text = entry[field]
            released, refusal = stage.push(text)
            if refusal is not None and self.refusal is None:
                self.refusal = refusal
            if released != text:
                entry[field] = released
                changed = True
        return changed

    def _stage(self, index: int, field: str, aligned: bool = False) -> TextStage | None:
        """`aligned`: the text's first delta came with its tokens (`_push_tokens`): they follow the text."""
        key = (index, field)
        try:
            return self._stages[key]
        except KeyError:
            stage = self._factory(_KIND_OF[field]) if self._factory is not None else None
            if aligned and stage is not None:
                stage = AlignedStage(stage)
                self._aligned = True
            self._stages[key] = stage
            return stage

    def _push(self, index: int, field: str, text: str) -> str:
        stage = self._stage(index, field)
        if stage is None:
            return text
        released, refusal = stage.push(text)
        if refusal is not None and self.refusal is None:
            self.refusal = refusal
        return released

    def _push_tokens(self, index: int, field: str, text: str, lens: list[int],
                     entries: list[Any]) -> tuple[str, list[Any] | None]:
        """`_push` of a text whose tokens spell it (`lens`, `entries`): what it releases, and the entries
        that go with that (None: none can; `entries` itself when it came as it was)."""
        stage = self._stage(index, field, aligned=True)
        if stage is None:
            return text, entries
        if type(stage) is not AlignedStage:  # the text's first delta came without tokens
            released = self._push(index, field, text)
            return released, entries if released == text else None
        released, kept, refusal = stage.push_tokens(text, lens, entries)
        if refusal is not None and self.refusal is None:
            self.refusal = refusal
        if released == text and (kept is None or len(kept) == len(entries)):
            return released, entries  # they spell exactly what goes out: the chunk goes as it came
        return released, kept

    def _flush_choice(self, index: int, tokens: Tokens | None = None) -> dict[str, Any]:
        """What the choice's windows still hold, as delta fields: a text field's tail, and the tails of
        `reasoning_details` texts as entries of their own. `tokens` gets each tail's entries."""
        tails: dict[str, Any] = {}
        for (i, field), stage in self._stages.items():
            if i != index or stage is None:
                continue
            tail, kept = self._flush_tokens(stage)
            if tail:
                tails[field] = tail
                if tokens is not None:
                    before = tokens.get(field, [])
                    tokens[field] = None if before is None or kept is None else before + kept
        entries = []
        for (i, at, field), (stage, etype) in self._details.items():
            tail = self._flush(stage) if i == index and stage is not None else ""
            if tail:
                entries.append({"type": etype, field: tail, "index": at})
        if entries:
            tails[REASONING_DETAILS] = entries
        return tails

    def _flush(self, stage: TextStage) -> str:
        tail, refusal = stage.flush()
        if refusal is not None and self.refusal is None:
            self.refusal = refusal
        return tail if self.refusal is None else ""

    def _flush_tokens(self, stage: TextStage) -> tuple[str, list[Any] | None]:
        if type(stage) is not AlignedStage:
            return self._flush(stage), None
        tail, kept, refusal = stage.flush_tokens()
        if refusal is not None and self.refusal is None:
            self.refusal = refusal
        return (tail, kept) if self.refusal is None else ("", None)

    def flush_all(self) -> bytes:
        """End of stream without a finish chunk: release what the windows still hold, as one chunk."""
        choices = []
        for index in sorted({i for i, _ in self._stages} | {key[0] for key in self._details}):
            tokens: Tokens = {}
            tails = self._flush_choice(index, tokens)
            if tails:
                choice = {"index": index, "delta": tails, "finish_reason": None}
                if self._aligned:
                    _set_logprobs(choice, tokens)
                choices.append(choice)
        if not choices:
            return b""
        self.output_released = True
        return encode_data(orjson.dumps({**self._base, "object": "chat.completion.chunk", "choices": choices}))

    @staticmethod
    def _is_empty(obj: dict[str, Any]) -> bool:
        """Nothing left worth sending: no text, role, tool call, finish or usage."""
        if obj.get("usage") is not None:
            return False
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("finish_reason"):
                return False
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                return False
            for key, value in delta.items():
                if key in _KIND_OF:
                    if value:
                        return False
                elif value not in (None, "", [], {}):
                    return False
        return True


def empty_logprobs(choice: dict[str, Any]) -> None:
    """A choice whose text the windows changed loses its logprobs: their tokens (one by one, with their
    `bytes` and top alternatives) spell out the upstream's text before the window, the secret included.
    Every list goes, not only `content`'s: some servers (vLLM) list a reasoning delta's tokens there too.
    (A text the windows only delayed keeps them, moved with its text: `_set_logprobs`.)"""
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        for key, value in logprobs.items():
            if isinstance(value, list) and value:
                logprobs[key] = []


def _token_list(delta: Any, logprobs: Any) -> tuple[str, list[int], list[Any]] | None:
    """A chunk's one text field and the one `logprobs` list that spells it token by token: (field, token
    lengths, entries); None for any other chunk (several texts or lists, `reasoning_details`, tokens that do
    not spell the text), whose logprobs go as they did (emptied when its text changed)."""
    if type(delta) is not dict or type(logprobs) is not dict or REASONING_DETAILS in delta:
        return None
    fields = [f for f in _KIND_OF if delta.get(f)]
    lists = [k for k, v in logprobs.items() if v]
    if len(fields) != 1 or len(lists) != 1 or lists[0] != _LIST_OF[fields[0]]:
        return None
    field = fields[0]
    text, entries = delta[field], logprobs[lists[0]]
    lens = token_lengths(entries, text) if type(text) is str else None
    return None if lens is None else (field, lens, entries)


def _set_logprobs(choice: dict[str, Any], tokens: Tokens) -> None:
    """A changed choice's logprobs: each text it carries with the entries that go with it (`AlignedStage`:
    they spell exactly that text), when every text has them; else every list emptied (`empty_logprobs`)."""
    delta = choice.get("delta")
    lists: dict[str, list[Any]] = {}
    for field in _KIND_OF:
        if isinstance(delta, dict) and delta.get(field):
            kept, key = tokens.get(field), _LIST_OF[field]
            if kept is None or key in lists:
                empty_logprobs(choice)
                return
            lists[key] = kept
    if not lists or (isinstance(delta, dict) and delta.get(REASONING_DETAILS)):
        empty_logprobs(choice)
        return
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        logprobs = choice["logprobs"] = {"content": None, "refusal": None}
    empty_logprobs(choice)
    logprobs.update(lists)


def _has_output(obj: dict[str, Any]) -> bool:
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("tool_calls") or any(delta.get(f) for f in _KIND_OF)):
            return True
    return False
