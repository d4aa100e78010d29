"""Secrets out of upstream failure texts, before any field of them is used (docs/extensions.md,
"Costs a client or an upstream can impose").

An upstream's error may echo our own credentials back ("Incorrect API key provided: sk-...", a proxy
quoting the `Proxy-Authorization` it got, an API manager quoting its subscription header). A
`Scrubber` is compiled once per config (`pipeline.safety.compile_safety`) from every secret written in
it that the gateway sends upstream, and reads the credentials the request signers obtain at run time
(`core.minted`: AWS keys and session tokens, Google access tokens) as they are when it runs. It masks
each of them exactly (the signers' first, then the configured ones, each the longest first, so a secret
that contains another is masked whole), then any `Bearer <token>` or `Authorization: Basic <token>`,
then whatever the built-in `secrets` redaction rules find, then, for a request whose model has a redaction
profile, whatever that profile masks (`with_profile`): an error can quote the prompt or the model's output
(a provider's 400 echoing part of the request, an in-stream error quoting generated text), and what the
profile masks in an answer must not reach the client in clear through an error instead.

Its cost is bounded, whatever the upstream sends: a text is cut first (at most `MAX_FIELD` characters of
one text and `MAX_TOTAL` of one failure or error object, plus `RULES_MARGIN`, moved back before any secret
the cut would split), then the exact masks are C-speed string replaces over what is kept and the rules run
on it, and what they leave is cut to the limit (so a match of the rules across the limit is masked whole,
not cut to a head the rules no longer know); a JSON walk visits at most `MAX_NODES` values. So a hostile
1 MiB error costs a few milliseconds of the event loop, not seconds, however many credentials the signers
hold. Pure: text in, text out.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gateway.core.events import Failure, InbandError, StreamEvent
from gateway.core.minted import MIN_SECRET, MintedSecrets
from gateway.core.redact.window import Redactor, mask_marker

MAX_FIELD = 4096  # characters of one upstream text kept, after the masks
# characters past the limit the rules still see: a match that crosses the limit (an e-mail address, a card
# number, a token) is masked before the cut, instead of cut to a head the rules no longer match
RULES_MARGIN = 256
MAX_TOTAL = 16384  # characters of one failure or error object through the rules
MAX_NODES = 4096  # values of one error object walked; what lies beyond is dropped
# An error object is a few levels deep. A hostile one nested to orjson's parse limit (1,024) would
# overflow Python's stack here and orjson's encoder (255 levels) after: what lies deeper is dropped.
MAX_DEPTH = 64
CUT = " [cut]"

# every exact secret: keys, header values, proxy credentials, the signers' credentials
_KEY_MARK = mask_marker("provider_key")
_BEARER_MARK = mask_marker("bearer_token")
_BASIC_MARK = mask_marker("basic_credentials")
# RFC 6750 §2.1: "Bearer" 1*SP b64token; we mask up to the next whitespace or quote, whatever it holds
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[^\s\"'<>]+")
# RFC 7617: a Basic credential, only where a header names it (the word "basic" alone is prose)
_BASIC = re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?basic\s+)[^\s\"'<>,;]+")


class _Budget:
    """What one failure or error object may still cost: characters through the rules, values walked."""

    __slots__ = ("chars", "nodes")

    def __init__(self) -> None:
        self.chars, self.nodes = MAX_TOTAL, MAX_NODES


class FailedEvent(Protocol):
    """An API's parsed upstream event that carries a failure (`ResponsesEvent`, `MessagesEvent`)."""

    @property
    def obj(self) -> dict[str, Any] | None: ...

    @property
    def events(self) -> list[StreamEvent]: ...

    @property
    def failure(self) -> Failure | None: ...


E = TypeVar("E", bound=FailedEvent)


@dataclass(frozen=True, slots=True)
class Scrubber:
    """Compiled once per config; immutable and shared by every request. `minted` is the process's one
    set of signer credentials (it outlives a reload: the signers are the process's), read at each use."""

    secrets: tuple[str, ...]  # longest first
    rules: Redactor
    minted: MintedSecrets | None = None
    profile: Redactor | None = None  # the request's model's redaction profile, after the `secrets` rules

    def with_profile(self, profile: Redactor | None) -> Scrubber:
        """This scrubber, masking also what a model's redaction profile masks (compiled once per config and
        model, `pipeline.safety.compile_safety`); itself without a profile."""
        return self if profile is None else dataclasses.replace(self, profile=profile)

    @classmethod
    def compile(cls, secrets: Iterable[str], minted: MintedSecrets | None = None) -> Scrubber:
        unique = {s for s in secrets if len(s) >= MIN_SECRET}
        return cls(tuple(sorted(unique, key=lambda s: (-len(s), s))), Redactor.compile(["secrets"], []), minted)

    def text(self, text: str, budget: _Budget | None = None) -> str:
        """`text` itself (the same object) when there is nothing to mask or cut, so callers can test `is`."""
        budget = budget or _Budget()
        original = text
        keep = min(MAX_FIELD, budget.chars)
        minted = self.minted.secrets if self.minted is not None else ()
        seen = keep + RULES_MARGIN if keep else 0  # no margin once the budget is spent: the bound stays
        cut = len(text) > seen
        if cut:  # only what can be kept is masked: the cost does not grow with the upstream's text
            text = text[:_clear_cut(text, seen, minted, self.secrets)]
        # the signers' first: a short configured value (a header's "2024-01-01") could otherwise cut a
        # token that happens to contain it, and leave the rest of the token in clear
        text = _mask_exact(_mask_exact(text, minted), self.secrets)
        if len(text) > seen:  # the exact masks made it longer
            text, cut = text[:seen], True
        budget.chars -= min(len(text), budget.chars)  # what the rules will read
        if "earer" in text or "EARER" in text:
            text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + _BEARER_MARK, text)
        if "asic" in text or "ASIC" in text:
            text = _BASIC.sub(lambda m: m.group(1) + _BASIC_MARK, text)
        text = self.rules.redact(text).text
        if self.profile is not None:
            text = self.profile.redact(text).text
        # cut after the masks: a cut through a mask leaves part of its marker, never part of what it masked
        if len(text) > keep:
            text, cut = text[:keep], True
        if cut:
            text += CUT
        return original if text == original else text

    def _opt(self, text: str | None, budget: _Budget) -> str | None:
        return None if text is None else self.text(text, budget)

    def failure(self, failure: Failure) -> Failure:
        """The failure with every upstream-derived text field scrubbed (message, code, type, param)."""
        b = _Budget()
        message = self.text(failure.message, b)
        code, type_, param = (self._opt(v, b) for v in (failure.code, failure.type, failure.param))
        if (message, code, type_, param) == (failure.message, failure.code, failure.type, failure.param):
            return failure
        return dataclasses.replace(failure, message=message, code=code, type=type_, param=param)

    def json(self, value: Any, budget: _Budget | None = None) -> Any:
        """Every string in a parsed JSON value scrubbed, object member names included; the value itself
        (the same object) when nothing changed, else a copy that shares the unchanged parts. A container
        nested deeper than `MAX_DEPTH`, or past `MAX_NODES` values, becomes None."""
        return self._walk(value, budget or _Budget(), MAX_DEPTH)

    def _walk(self, value: Any, b: _Budget, depth: int) -> Any:
        b.nodes -= 1
        if isinstance(value, str):
            return self.text(value, b) if b.nodes >= 0 else ""
        if isinstance(value, (list, dict)) and (depth == 0 or b.nodes < 0):  # a tuple: see core.json_body._deeper
            return None
        if isinstance(value, list):
            items = [self._walk(v, b, depth - 1) for v in value]
            return value if all(a is v for a, v in zip(items, value, strict=True)) else items
        if isinstance(value, dict):
            pairs = [(self.text(k, b), self._walk(v, b, depth - 1)) for k, v in value.items()]
            if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
                return value
            return dict(pairs)
        return value

    def event(self, ev: E) -> E:
        """An upstream failure event kept by a stream core after the first token, scrubbed: its failure
        and its whole object but a `response.failed`'s `response.output` (the answer so far: model
        output, which the redaction filter rewrites and which must stay the text the client was sent
        as deltas, docs/extensions.md, "Redaction in every script"). `raw` is dropped: the event is re-encoded from the
        scrubbed object, so what was checked is exactly what the client gets (raw bytes can hold a secret the parse does
        not show, e.g. in the first of two duplicate members)."""
        events = [InbandError(self.failure(e.failure)) if type(e) is InbandError else e for e in ev.events]
        obj = ev.obj
        if obj is not None:
            obj = self._event_obj(obj)
        return dataclasses.replace(ev, obj=obj, raw=None, events=events)  # type: ignore[type-var]

    def _event_obj(self, obj: dict[str, Any]) -> dict[str, Any]:
        b = _Budget()
        resp = obj.get("response")
        if not (isinstance(resp, dict) and "output" in resp):
            clean: dict[str, Any] = self.json(obj, b)
            return clean if isinstance(clean, dict) else {}
        rest = self.json({k: v for k, v in resp.items() if k != "output"}, b)
        outer = self.json({k: v for k, v in obj.items() if k != "response"}, b)
        return {**outer, "response": {**rest, "output": resp["output"]}}


def _clear_cut(text: str, at: int, *groups: tuple[str, ...]) -> int:
    """The last position at or before `at` that no occurrence of a secret straddles: a cut there leaves
    no part of one (a secret cut in two would be masked in neither half). Each look is a find in a
    window twice the secret's length around the cut; each move goes back, so at most `at` of them."""
    moved = True
    while moved and at > 0:
        moved = False
        for secrets in groups:
            for secret in secrets:
                n = len(secret)
                # an occurrence wholly inside this window starts before `at` and ends after it
                start = text.find(secret, max(0, at - n + 1), at + n - 1)
                if start != -1:
                    at, moved = start, True
    return at


def _mask_exact(text: str, secrets: tuple[str, ...]) -> str:
    if not secrets or len(text) < len(secrets[-1]):  # longest first: the last is the shortest
        return text
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, _KEY_MARK)
    return text


@functools.lru_cache(maxsize=64)
def _for(keys: tuple[str, ...]) -> Scrubber:
    return Scrubber.compile(keys)


# One-off forms for tests and tools; the request path uses the config's compiled `Scrubber`.
def scrub_text(text: str, keys: Iterable[str]) -> str:
    return _for(tuple(keys)).text(text)


def scrub_failure(failure: Failure, keys: Iterable[str]) -> Failure:
    return _for(tuple(keys)).failure(failure)


def scrub_json(value: Any, keys: Iterable[str]) -> Any:
    return _for(tuple(keys)).json(value)
