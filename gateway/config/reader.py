"""Typed, path-tracking access to a raw YAML document, and `${NAME}` interpolation (docs/reference.md, "Config keys").

Every problem is recorded as `path: problem`; messages name keys and types, never values, so a secret
cannot end up in an error.
"""

from __future__ import annotations

import difflib
import math
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """A config that cannot be used; `errors` lists `path: problem` lines."""

    def __init__(self, errors: list[str]):
        super().__init__("\n".join(errors))
        self.errors = errors


class Errors:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.keys: set[str] = set()  # every key path a Section of this document accepts
        self._unset_env: set[str] = set()  # paths whose `${NAME}` is unset: that one error says it all
        self.interpolated: set[str] = set()  # paths whose string held a `${NAME}`: a boolean may come as one

    def add(self, path: str, problem: str) -> None:
        if path in self._unset_env:
            return  # "must be int, got str" after "PORT is not set" would send the reader astray
        self.items.append(f"{path}: {problem}")

    def unset(self, path: str) -> bool:
        """Whether `path` held a `${NAME}` that is unset (its value is empty, and already reported)."""
        return path in self._unset_env

    def unset_env(self, path: str, name: str) -> None:
        self.add(path, f"environment variable {name} is not set and has no default")
        self._unset_env.add(path)


def interpolate(value: str, path: str, env: Mapping[str, str], errs: Errors) -> str:
    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        errs.unset_env(path, name)
        return ""

    if "${" not in value:
        return value
    errs.interpolated.add(path)
    return _ENV_REF.sub(sub, value)


def expand_env(node: Any, path: str, env: Mapping[str, str], errs: Errors) -> Any:
    if isinstance(node, str):
        return interpolate(node, path, env, errs)
    if isinstance(node, dict):
        return {k: expand_env(v, f"{path}.{k}" if path else str(k), env, errs) for k, v in node.items()}
    if isinstance(node, list):
        return [expand_env(v, f"{path}[{i}]", env, errs) for i, v in enumerate(node)]
    return node


class Section:
    """Typed access to one mapping of the raw config, recording errors with key paths."""

    def __init__(self, raw: Any, path: str, errs: Errors, allowed: tuple[str, ...]):
        self.path, self.errs = path, errs
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            errs.add(path or "(root)", "must be a mapping")
            raw = {}
        self.raw: dict[str, Any] = raw
        errs.keys.update(self.at(k) for k in allowed)
        for key in raw:
            if key not in allowed:
                errs.add(self.at(str(key)), "unknown key" + did_you_mean(str(key), allowed))

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: T) -> T:
        if key not in self.raw or self.raw[key] is None:
            return default
        value = self.raw[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, str) and str not in kinds:
            if int in kinds or float in kinds:
                value = number_from_env_string(value, kinds)
            elif bool in kinds and self.at(key) in self.errs.interpolated:  # a quoted "yes" stays an error
                value = _BOOLEAN_WORDS.get(value.strip().lower(), value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            self.errs.add(self.at(key), f"must be {names}, got {type(value).__name__}")
            return default
        return value  # type: ignore[return-value]

    def number(self, key: str, default: float, minimum: float = 0.0, *, finite: bool = False) -> float:
        """`finite`: `.inf` is an error too (a share or a price; elsewhere it may mean "no limit"). NaN
        (YAML's `.nan`) is an error everywhere: it passes every comparison, a minimum's too."""
        value = self.get(key, float, default)
        if value != value or (finite and value in (math.inf, -math.inf)):
            self.errs.add(self.at(key), "must be a finite number" if finite else "must be a number, got NaN")
            return default
        if value < minimum:
            self.errs.add(self.at(key), f"must be >= {minimum:g}")
        return value

    def integer(self, key: str, default: int, minimum: int = 0) -> int:
        value = self.get(key, int, default)
        if value < minimum:
            self.errs.add(self.at(key), f"must be >= {minimum}")
        return value

    def optional_int(self, key: str, minimum: int = 1) -> int | None:
        return self.integer(key, 0, minimum) if self.has(key) else None

    def word(self, key: str, default: str) -> str:
        """A string option that may be written as a bare `on`/`off`: YAML 1.1 reads those (and `true`/`false`,
        `yes`/`no`) as booleans, which mean "on"/"off" (docs/reference.md, "Config keys"). The one rule for
        every on/off-style option; each caller still checks the word against what it allows."""
        value: bool | str = self.get(key, (str, bool), default)
        if isinstance(value, bool):
            return "on" if value else "off"
        return value

    def choice(self, key: str, options: tuple[str, ...], default: str) -> str:
        on_off = "on" in options or "off" in options  # where a bare on/off is a word (`word`), else a type error
        value = self.word(key, default) if on_off else self.get(key, str, default)
        if value not in options:
            self.errs.add(self.at(key), f'must be one of {", ".join(options)}, got "{value}"')
            return default
        return value

    def strings(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self.get(key, list, list(default))
        out: list[str] = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                out.append(item)
            else:
                self.errs.add(f"{self.at(key)}[{i}]", "must be a string")
        return tuple(out)

    def items(self, key: str) -> list[tuple[str, Any]]:
        value = self.get(key, list, [])
        return [(f"{self.at(key)}[{i}]", item) for i, item in enumerate(value)]


def did_you_mean(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def http_url_problem(value: str) -> str | None:
    """What is wrong with an http(s) URL the gateway will call (None: nothing), checked at load: a port
    that is not one (`:99999`, `:80a`) otherwise passed and failed only at request time, as a 500. The
    problem never quotes the URL (it may carry credentials)."""
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port  # parsing it is the check: it raises on what is not a port
    except ValueError:
        return "must be an http:// or https:// URL with a port from 1 to 65535"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if port == 0:
        return "must be an http:// or https:// URL with a port from 1 to 65535"
    return None


# `${FLAG}` interpolates to a string; where a boolean is expected it is read as YAML would read it bare
_BOOLEAN_WORDS = {"true": True, "false": False, "on": True, "off": False, "yes": True, "no": False}


def number_from_env_string(value: str, kinds: tuple[type, ...]) -> Any:
    """`${PORT}` interpolates to a string; accept it where a number is expected."""
    try:
        return int(value) if int in kinds and value.strip().lstrip("-").isdigit() else float(value)
    except ValueError:
        return value
