"""A model's other names (docs/agents.md, "Gateway config" `models[].aliases`): exact names and globs, checked for
overlap once at load and compiled into the index a request's `model` is looked up in.

A glob has `*` (any run of characters, none included) and `?` (one character); nothing else is special,
so `[` never starts a class. An exact name (a model's `name` or an exact alias) wins over every glob;
two exact names that are equal, or two globs of different models that some name could match both, are a
config error: which model a name reaches must never depend on the order of the config.

Requested names are untrusted: matching is a linear scan of the globs with a two-pointer matcher
(O(len(name) x len(glob)) at worst), and a name longer than `MAX_MATCHED` is looked up exactly only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

WILDCARDS = "*?"
MAX_MATCHED = 256  # no real model name is longer; a longer requested name is not matched against globs
ALIAS = re.compile(r"^[A-Za-z0-9_.:/@*?-]{1,128}$")  # Bedrock `us.anthropic.…:0`, Vertex `…@2025…`
ALIAS_RULE = "letters, digits, _ . : - / @, with * or ? for a glob (max 128)"


def is_glob(alias: str) -> bool:
    return any(c in alias for c in WILDCARDS)


def glob_match(pattern: str, name: str) -> bool:
    """Whether `name` matches `pattern` (`*`: any run, `?`: one character). The classic two-pointer walk:
    on a mismatch, go back to the last `*` and let it take one more character."""
    p = n = 0
    star, star_n = -1, 0
    while n < len(name):
        if p < len(pattern) and (pattern[p] == "?" or (pattern[p] != "*" and pattern[p] == name[n])):
            p, n = p + 1, n + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, star_n, p = p, n, p + 1
        elif star >= 0:
            star_n += 1
            p, n = star + 1, star_n
        else:
            return False
    return all(c == "*" for c in pattern[p:])


def _closure(pattern: str, i: int) -> int:
    """`*` may match nothing: the furthest position reachable from `i` without reading a character is
    reached by skipping stars; the positions between are all stars, which the walk keeps via `i`."""
    while i < len(pattern) and pattern[i] == "*":
        i += 1
    return i


def _steps(pattern: str, i: int, c: str) -> set[int]:
    """The positions after reading `c` from any position in `i`'s closure (stars stay, or move on)."""
    out: set[int] = set()
    for k in range(i, _closure(pattern, i) + 1):
        if k < len(pattern):
            if pattern[k] == "*":
                out.add(k)
            elif pattern[k] == "?" or pattern[k] == c:
                out.add(k + 1)
    return out


def globs_overlap(a: str, b: str) -> bool:
    """Whether some name matches both globs: a walk of the two patterns' product automaton. Characters
    that neither pattern names behave alike, so one stand-in (NUL, never in an alias) covers them all."""
    alphabet = {c for c in a + b if c not in WILDCARDS} | {"\0"}
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if _closure(a, i) == len(a) and _closure(b, j) == len(b):
            return True
        for c in alphabet:
            todo.extend((x, y) for x in _steps(a, i, c) for y in _steps(b, j, c))
    return False


@dataclass(frozen=True, slots=True)
class ModelNames:
    """Every name a client may send for a model: exact ones (names and exact aliases) and globs."""

    exact: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # name -> model
    globs: tuple[tuple[str, str], ...] = ()  # (glob, model), config order
    # a deployment's upstream model name -> the models served under it, config order (docs/agents.md,
    # "Names the gateway gave back"): looked up only when no name or alias matches
    upstream: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    order: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # model -> config position

    def resolve(self, requested: str) -> str | None:
        """The configured model's name `requested` reaches, or None."""
        model = self.exact.get(requested)
        if model is not None or len(requested) > MAX_MATCHED:
            return model
        for pattern, name in self.globs:
            if glob_match(pattern, name=requested):
                return name
        return None

    def served_as(self, upstream_name: str) -> tuple[str, ...]:
        """The models a deployment serves under `upstream_name` (its configured `model`), config order."""
        return self.upstream.get(upstream_name, ())


@dataclass(frozen=True, slots=True)
class Named:
    """One model's names as written: where (`models[2]`), its name, its aliases, and the upstream model
    names of its deployments (names the gateway gives back in answers)."""

    path: str
    name: str
    aliases: tuple[str, ...]
    upstream: tuple[str, ...] = ()


def compile_names(models: list[Named]) -> tuple[ModelNames, list[tuple[str, str]]]:
    """The index, and every problem as (key path, message): a malformed alias, an exact name given twice,
    or globs of two models that overlap (docs/agents.md, "Gateway config")."""
    problems: list[tuple[str, str]] = []
    exact: dict[str, tuple[str, str]] = {m.name: (m.name, f"{m.path}.name") for m in models}
    globs: list[tuple[str, str, str]] = []  # (glob, model, path)
    for m in models:
        for k, alias in enumerate(m.aliases):
            path = f"{m.path}.aliases[{k}]"
            if not ALIAS.match(alias):
                problems.append((path, f"must be {ALIAS_RULE}"))
            elif is_glob(alias):
                problems += [(path, f'glob "{alias}" overlaps "{g}" of model "{owner}" ({where}): a name could '
                                    "match both") for g, owner, where in globs
                             if owner != m.name and globs_overlap(alias, g)]
                globs.append((alias, m.name, path))
            elif alias in exact and exact[alias][0] != m.name:
                owner, where = exact[alias]
                problems.append((path, f'"{alias}" is already a name of model "{owner}" ({where})'))
            else:
                exact.setdefault(alias, (m.name, path))
    index = ModelNames(MappingProxyType({n: owner for n, (owner, _) in exact.items()}),
                       tuple((g, owner) for g, owner, _ in globs), _upstream_names(models),
                       MappingProxyType({m.name: i for i, m in enumerate(models)}))
    return index, problems


def _upstream_names(models: list[Named]) -> Mapping[str, tuple[str, ...]]:
    """Each upstream model name -> the models whose deployments use it, each once, in config order."""
    out: dict[str, list[str]] = {}
    for m in models:
        for upstream in m.upstream:
            served = out.setdefault(upstream, [])
            if m.name not in served:
                served.append(m.name)
    return MappingProxyType({name: tuple(served) for name, served in out.items()})


def not_a_model(name: str, index: ModelNames) -> str:
    """The error for a key's `models` entry that is no model's name: an alias names its model (a key's
    list grants whole models: every name of an allowed model is allowed)."""
    owner = index.resolve(name)
    if owner is not None:
        return f'"{name}" is an alias of model "{owner}": list the model\'s name'
    return f'unknown model "{name}"'
