"""Names the gateway gave back (docs/agents.md, "Names the gateway gave back"): a request may name a model
by the upstream model name an answer of one of its deployments carried, so Claude Code's `--resume`,
a retry or a copied name reaches the model that served it.

Configured upstream names are compiled with the config (`config.aliases.ModelNames.upstream`). The
names an upstream reports that differ from the configured one (a dated snapshot for `gpt-4o`, the
Anthropic name Bedrock answers for `us.anthropic.…:0`) are learned here from answers, bounded: a name
the config already resolves is never learned, so a learned name never shadows one. The process that
learns one records it in the state backend (`Runtime.learn_served_name`); another process adopts it from
there when a request sends it back (`Runtime.shared_model`), if its own config has that model serving
under that configured upstream name. A name still answered under is recorded again once a day, so the
state's record (kept `state.base.SERVED_NAME_TTL_S` from the last) outlives processes that run for weeks.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from gateway.config.aliases import ALIAS, ModelNames
from gateway.config.types import ApiKey, ModelConfig
from gateway.state.base import ServedName

MAX_LEARNED = 1024  # reported names kept; past it the oldest learned is forgotten
MAX_RESOLVED = 1024  # reported names the config resolves itself, remembered so as not to check them again
MAX_MODELS_PER_NAME = 16  # models one reported name may reach (two models on one upstream are already rare)
RECORD_AGAIN_S = 86_400.0  # a learned name still answered under is recorded in the state again after this


class LearnedNames:
    """Reported upstream name -> the models whose answers carried it, oldest learned first out."""

    __slots__ = ("_checked_with", "_clock", "_names", "_recorded", "_resolved")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._names: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._recorded: dict[str, float] = {}  # learned name -> when the state was last told of it
        self._clock = clock
        # names the config already resolves (an alias glob matches the snapshot an upstream reports: the
        # common case), valid for the compiled names they were checked with; a reload starts them afresh
        self._resolved: set[str] = set()
        self._checked_with: ModelNames | None = None

    def __len__(self) -> int:
        return len(self._names)

    def models(self, reported: str) -> tuple[str, ...]:
        return self._names.get(reported, ())

    def learn(self, reported: object, model: str, configured: str, names: ModelNames) -> bool:
        """An answer of `model`'s deployment (configured upstream name `configured`) said its model was
        `reported`. Kept when it is a name the config does not resolve; checked cheaply first, as this
        runs on every answer. True when the state backend is to record it: not known before (once per
        name and model: rare), or last recorded over `RECORD_AGAIN_S` ago."""
        if reported == configured or not isinstance(reported, str):
            return False
        known = self._names.get(reported)
        if known is not None and model in known:
            return self._record_again(reported)
        if names is not self._checked_with:
            self._resolved.clear()
            self._checked_with = names
        if reported in self._resolved:
            return False
        if not ALIAS.match(reported):
            return False  # not a name a client could send back
        if names.resolve(reported) is not None or names.served_as(reported):
            if len(self._resolved) < MAX_RESOLVED:
                self._resolved.add(reported)
            return False
        if known is None:
            while len(self._names) >= MAX_LEARNED:
                self._recorded.pop(self._names.popitem(last=False)[0], None)
            self._names[reported] = (model,)
        elif len(known) < MAX_MODELS_PER_NAME:
            self._names[reported] = (*known, model)
        else:
            return False
        self._recorded[reported] = self._clock()
        return True

    def _record_again(self, reported: str) -> bool:
        now = self._clock()
        if now - self._recorded.get(reported, now) < RECORD_AGAIN_S:
            return False
        self._recorded[reported] = now
        return True

    def adopt(self, reported: str, served: Iterable[ServedName], names: ModelNames) -> None:
        """Names another process learned (read from the state backend): each kept as `learn` keeps a name,
        and only for a model of this config that serves under the configured upstream name recorded with
        it (a name recorded under an older or another config reaches nothing here)."""
        for s in served:
            if s.model in names.served_as(s.upstream):
                self.learn(reported, s.model, s.upstream, names)


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
