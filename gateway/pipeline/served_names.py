"""Names the gateway gave back (docs/agents.md, "Names the gateway gave back"): a request may name a model
by the upstream model name an answer of one of its deployments carried, so Claude Code's `--resume`,
a retry or a copied name reaches the model that served it.

Configured upstream names are compiled with the config (`config.aliases.ModelNames.upstream`). The
names an upstream reports that differ from the configured one (a dated snapshot for `gpt-4o`, the
Anthropic name Bedrock answers for `us.anthropic.…:0`) are learned here from answers, per process,
bounded: a name the config already resolves is never learned, so a learned name never shadows one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from gateway.config.aliases import ALIAS, ModelNames
from gateway.config.types import ApiKey, ModelConfig

MAX_LEARNED = 1024  # reported names kept; past it the oldest learned is forgotten
MAX_RESOLVED = 1024  # reported names the config resolves itself, remembered so as not to check them again
MAX_MODELS_PER_NAME = 16  # models one reported name may reach (two models on one upstream are already rare)


class LearnedNames:
    """Reported upstream name -> the models whose answers carried it, oldest learned first out."""

    __slots__ = ("_checked_with", "_names", "_resolved")

    def __init__(self) -> None:
        self._names: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # names the config already resolves (an alias glob matches the snapshot an upstream reports: the
        # common case), valid for the compiled names they were checked with; a reload starts them afresh
        self._resolved: set[str] = set()
        self._checked_with: ModelNames | None = None

    def __len__(self) -> int:
        return len(self._names)

    def models(self, reported: str) -> tuple[str, ...]:
        return self._names.get(reported, ())

    def learn(self, reported: object, model: str, configured: str, names: ModelNames) -> None:
        """An answer of `model`'s deployment (configured upstream name `configured`) said its model was
        `reported`. Kept when it is a name the config does not resolve; checked cheaply first, as this
        runs on every answer."""
        if reported == configured or not isinstance(reported, str):
            return
        known = self._names.get(reported)
        if known is not None and model in known:
            return
        if names is not self._checked_with:
            self._resolved.clear()
            self._checked_with = names
        if reported in self._resolved:
            return
        if not ALIAS.match(reported):
            return  # not a name a client could send back
        if names.resolve(reported) is not None or names.served_as(reported):
            if len(self._resolved) < MAX_RESOLVED:
                self._resolved.add(reported)
            return
        if known is None:
            while len(self._names) >= MAX_LEARNED:
                self._names.popitem(last=False)
            self._names[reported] = (model,)
        elif len(known) < MAX_MODELS_PER_NAME:
            self._names[reported] = (*known, model)


def served_model(requested: str, key: ApiKey | None, names: ModelNames, learned: LearnedNames,
                 lookup: Callable[[str], ModelConfig | None]) -> ModelConfig | None:
    """The model an upstream name reaches when no name or alias matched: among the models served under
    it (configured, else learned), the first in config order that `key` may use; when the key may use
    none, the first (the caller's authorisation answers it as an unknown name)."""
    candidates = names.served_as(requested)
    if not candidates:
        # learned before a reload may name a model the config no longer has
        candidates = tuple(sorted((m for m in learned.models(requested) if m in names.order),
                                  key=names.order.__getitem__))
    allowed = key.models if key is not None else None
    for name in candidates:
        if allowed is None or name in allowed:
            return lookup(name)
    return lookup(candidates[0]) if candidates else None
