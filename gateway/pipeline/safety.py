"""Per-model safety compiled once per config: the redaction profile and the guardrails (docs/extensions.md,
"Redaction in every script").

Redaction and guardrails belong to the *requested* model, whichever deployment serves it. A request gets
a `SafetyRun`, which builds the text window chain (redaction, then each stream-mode guardrail) for every
(choice, text kind) and gathers the redaction counts for the metric and the log line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from gateway.config.types import Config, GuardrailConfig, Proxy, RedactionProfile
from gateway.core.events import DeltaKind
from gateway.core.minted import MintedSecrets
from gateway.core.scrub import Scrubber

if TYPE_CHECKING:
    from gateway.core.policy.guard import GuardWindow, TextGuard, Verdict
    from gateway.core.redact.window import RedactionWindow, Redactor
    from gateway.pipeline.slicer import Slicer

TextMap = Callable[[DeltaKind, str], str]  # one text of a body -> what the body carries instead


@dataclass(frozen=True, slots=True)
class Guardrail:
    config: GuardrailConfig
    text: TextGuard | None  # None for webhooks

    @property
    def name(self) -> str:
        return self.config.name

    def applies(self, stage: str) -> bool:
        return self.config.stage in (stage, "both")


class _Chain:
    """Redaction window, then each stream guardrail's window: one text kind of one choice."""

    __slots__ = ("_redact_only", "guards", "push_together", "redaction")

    def __init__(self, redaction: RedactionWindow | None, guards: list[GuardWindow]):
        self.redaction, self.guards = redaction, guards
        # The usual chain is redaction alone; its push, bound once, is all a delta needs (and the
        # relay gives it a read's deltas together: `ChatOutputFilter.content_push`).
        self._redact_only: Callable[[str], str] | None = None
        self.push_together: Callable[[list[str]], list[str]] | None = None
        if redaction is not None and not guards:
            self._redact_only, self.push_together = redaction.push, redaction.push_together

    def push(self, text: str) -> tuple[str, Verdict | None]:
        redact_only = self._redact_only
        if redact_only is not None:
            return redact_only(text), None
        if self.redaction is not None:
            text = self.redaction.push(text)
        return self._through_guards(text, flush=False)

    def flush(self) -> tuple[str, Verdict | None]:
        text = self.redaction.flush() if self.redaction is not None else ""
        return self._through_guards(text, flush=True)

    @property
    def held_chars(self) -> int:
        held = self.redaction.held_chars if self.redaction is not None else 0
        return held + sum(g.held_chars for g in self.guards)

    def _through_guards(self, text: str, flush: bool) -> tuple[str, Verdict | None]:
        """Every guard sees what the guards before it released. Once one refuses, the stream ends: the
        text released before its violation still passes every later guard, which then flush."""
        refusal: Verdict | None = None
        for g in self.guards:
            out, verdict = g.push(text) if text else ("", None)
            if verdict is None and (flush or refusal is not None):
                more, verdict = g.flush()
                out += more
            text = out
            refusal = refusal or verdict
        return text, refusal


@dataclass(slots=True)
class SafetyRun:
    safety: ModelSafety
    chains: list[_Chain] = field(default_factory=list)

    def factory(self, kind: DeltaKind) -> _Chain | None:
        s = self.safety
        redaction = s.redactor.window() if s.redactor is not None and kind in s.scope else None
        guards = [g.text.window() for g in s.stream_guards if g.text is not None]
        if redaction is None and not guards:
            return None
        chain = _Chain(redaction, guards)
        self.chains.append(chain)
        return chain

    def redaction_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.chains:
            if c.redaction is not None:
                for rule, n in c.redaction.take_counts().items():
                    out[rule] = out.get(rule, 0) + n
        return out


@dataclass(frozen=True, slots=True)
class ModelSafety:
    redactor: Redactor | None
    scope: frozenset[DeltaKind]
    redact_inputs: bool
    input_guards: tuple[Guardrail, ...]
    stream_guards: tuple[Guardrail, ...]  # output, mode stream: windowed
    hold_guards: tuple[Guardrail, ...]  # output, mode hold: whole answer before release
    audit_guards: tuple[Guardrail, ...]  # output, mode audit: whole answer after release
    # the policy an answer of this model is judged and masked by, as a digest: part of its response cache
    # key, so an answer cached under one policy is never served under another (a reload's new guardrail
    # or redaction rule). Made once per config, never per request (policy_fingerprint, below)
    fingerprint: str = ""

    @property
    def filters_stream(self) -> bool:
        return self.redactor is not None or bool(self.stream_guards)

    def start(self) -> SafetyRun | None:
        return SafetyRun(self) if self.filters_stream else None

    async def mask_texts(self, slicer: Slicer, walk: Callable[[TextMap], object]) -> dict[str, int]:
        """Mask one-shot every text in scope of a whole body (non-stream answers, cached answers), a
        slice at a time between the loop's other work (`pipeline.slicer`); the masks made, per rule.

        `walk(fn)` calls `fn(kind, text)` for each text of the body and stores what it returns. It is
        called twice, to find the texts and to write them back, so it visits the same texts in the
        same order both times (the body does not change in between: nothing else holds it)."""
        scope = self.scope
        if self.redactor is None or not scope:
            return {}
        found: list[dict[str, str]] = []

        def find(kind: DeltaKind, text: str) -> str:
            if kind in scope and text:
                found.append({"t": text})
            return text

        walk(find)
        if not found:
            return {}
        counts = await slicer.redact(self.redactor, [(h, "t") for h in found])
        masked = iter([h["t"] for h in found])

        def put(kind: DeltaKind, text: str) -> str:
            return next(masked) if kind in scope and text else text

        walk(put)
        return counts


@dataclass(frozen=True, slots=True)
class Safety:
    models: dict[str, ModelSafety]
    # our upstream credentials, configured and minted by the signers, out of every upstream failure text
    # (docs/extensions.md, "secrets in upstream texts")
    scrubber: Scrubber
    # by model, for a model with a redaction profile: `scrubber` masking what the profile masks too
    by_model: dict[str, Scrubber] = field(default_factory=dict)

    def scrubber_for(self, model: str) -> Scrubber:
        """What scrubs an upstream failure text of a request for `model` (the configured name): an error
        can quote the prompt or the answer, so the model's redaction profile masks it too."""
        return self.by_model.get(model, self.scrubber)


def upstream_secrets(config: Config) -> Iterator[str]:
    """Every configured secret the gateway sends upstream: provider keys (a `bedrock` provider's AWS keys
    too: to Bedrock, or to STS for its `role_arn`), every value of `providers.<name>.headers`
    (API-management keys ride there), and the credentials of every proxy URL (the providers' own and
    HTTPS_PROXY / HTTP_PROXY), in each form a proxy may quote them. What the signers get at run time is
    not here: `upstream.signing.MintedCredentials`."""
    proxies = [config.egress.https, config.egress.http]
    for p in config.providers.values():
        if p.api_key:
            yield p.api_key
        if p.aws is not None:
            yield from (v for v in (p.aws.access_key_id, p.aws.secret_access_key, p.aws.session_token) if v)
        yield from p.headers.values()
        proxies.append(p.proxy)
    for proxy in proxies:
        yield from _proxy_secrets(proxy)


def _proxy_secrets(proxy: Proxy | None) -> Iterator[str]:
    """`Basic <base64>` -> the base64 token, `user:password`, and the password as typed and URL-encoded."""
    if proxy is None or not proxy.authorization:
        return
    token = proxy.authorization.partition(" ")[2]
    yield token
    try:
        pair = base64.b64decode(token, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return
    user, _, password = pair.partition(":")
    yield pair
    if password:
        yield password
        yield urllib.parse.quote(password, safe="")
        yield urllib.parse.quote(f"{user}:{password}", safe=":")


def _redactor(profile: RedactionProfile) -> Redactor:
    from gateway.core.redact.window import Redactor

    return Redactor.compile(profile.rules, [(c.name, c.pattern) for c in profile.custom])


def _guardrail(g: GuardrailConfig) -> Guardrail:
    if g.type == "webhook":
        return Guardrail(g, None)
    from gateway.core.policy.guard import TextGuard

    return Guardrail(g, TextGuard.compile(g.name, g.type, g.terms, g.patterns))


def policy_fingerprint(guards: list[Guardrail], profile: RedactionProfile | None, redactor: Redactor | None) -> str:
    """A digest of a model's guardrails (every field) and redaction profile, the profile's rules as
    compiled (a built-in rule's pattern changed by an upgrade counts, for a cache shared in Redis)."""
    rules = [(r.name, r.regex.pattern) for r in redactor.rules] if redactor is not None else []
    policy = orjson.dumps([[g.config for g in guards], profile, rules])
    return hashlib.sha256(policy).hexdigest()[:32]


def compile_safety(config: Config, minted: MintedSecrets | None = None) -> Safety:
    """`minted`: the process's signer credentials (`upstream.signing.MintedCredentials`), which the
    scrubber reads as they are at each use; None where nothing is sent (`check-config`)."""
    used = {m.redaction for m in config.models.values()}
    redactors = {name: _redactor(p) for name, p in config.redaction_profiles.items() if name in used}
    guards = {name: _guardrail(g) for name, g in config.guardrails.items()}
    models: dict[str, ModelSafety] = {}
    for m in config.models.values():
        mine = [guards[n] for n in m.guardrails]
        out = [g for g in mine if g.applies("output")]
        profile = config.redaction_profiles.get(m.redaction)
        models[m.name] = ModelSafety(
            redactor=redactors.get(m.redaction),
            scope=frozenset(DeltaKind(s) for s in (profile.scope if profile else ())),
            redact_inputs=bool(profile and profile.inputs),
            input_guards=tuple(g for g in mine if g.applies("input")),
            stream_guards=tuple(g for g in out if g.config.mode == "stream" and g.text is not None),
            # a webhook cannot judge a stream incrementally: until it has answered no text is known to
            # be safe, so in stream mode it holds the answer for its verdict (docs/reference.md, "`guardrails`")
            hold_guards=tuple(g for g in out if g.config.mode == "hold"
                              or (g.config.mode == "stream" and g.text is None)),
            audit_guards=tuple(g for g in out if g.config.mode == "audit"),
            fingerprint=policy_fingerprint(mine, profile, redactors.get(m.redaction)),
        )
    scrubber = Scrubber.compile(upstream_secrets(config), minted)
    by_profile = {name: scrubber.with_profile(r) for name, r in redactors.items()}
    by_model = {m.name: by_profile[m.redaction] for m in config.models.values() if m.redaction in by_profile}
    return Safety(models, scrubber, by_model)
