"""Every on/off-style option may be written bare (docs/reference.md, "Config keys"): YAML 1.1 reads a bare
`on`/`off` (and `true`/`false`, `yes`/`no`) as a boolean, which means "on"/"off" wherever the option's
values include that word. Parsed from YAML text, as an operator writes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gateway.config import ConfigError, parse_config
from gateway.config.types import Config

DOC = """
auth: {allow_unauthenticated: true}
providers: {demo: {type: mock}}
models:
  - name: m
    deployments: [{provider: demo, model: x}]
%s
"""
MODEL, STORE = "    %s: %s", "store: {url: 'sqlite:///x.db', %s: %s}"
Read = Callable[[Config], Any]


def parse(key: str, value: str, where: str = MODEL) -> Config:
    return parse_config(yaml.safe_load(DOC % (where % (key, value))), env={})


def errors(key: str, value: str, where: str = MODEL) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(key, value, where)
    return info.value.errors


def affinity(c: Config) -> Any:
    return c.models["m"].affinity


def redaction(c: Config) -> Any:
    return c.models["m"].redaction


def journal(c: Config) -> Any:
    return c.store.ledger_journal


@pytest.mark.parametrize("bare", ["off", "false", "no", "Off", "OFF"])
@pytest.mark.parametrize(("key", "where", "read"), [
    ("affinity", MODEL, affinity), ("redaction", MODEL, redaction), ("ledger_journal", STORE, journal)],
    ids=["affinity", "redaction", "ledger_journal"])
def test_a_bare_off_is_off(bare: str, key: str, where: str, read: Read) -> None:
    assert read(parse(key, bare, where)) == "off"
    assert read(parse(key, '"off"', where)) == "off"  # quoted, a string: the same


def test_the_other_words_of_the_example_config_parse_beside_a_bare_off() -> None:
    """The contract example's spellings, each beside a bare `off` on the same model or store."""
    config = parse_config(yaml.safe_load(DOC % (
        "    affinity: off\n    redaction: off\n    continuation: on\n    prompt_cache: {breakpoints: auto}\n"
        "store: {url: 'sqlite:///x.db', ledger_journal: off}")), env={})
    m = config.models["m"]
    assert (m.affinity, m.redaction, m.continuation, m.auto_breakpoints) == ("off", "off", True, True)
    assert config.store.ledger_journal == "off"
    assert parse("affinity", "session").models["m"].affinity == "session"
    assert parse("ledger_journal", "/var/lib/gateway/ledger", STORE).store.ledger_journal == "/var/lib/gateway/ledger"


@pytest.mark.parametrize(("key", "value", "where", "expected"), [
    ("affinity", "on", MODEL, 'models[0].affinity: must be one of off, session, got "on"'),
    ("affinity", "true", MODEL, 'models[0].affinity: must be one of off, session, got "on"'),
    ("continuation", "sometimes", MODEL, 'models[0].continuation: must be one of on, off, got "sometimes"'),
    ("prompt_cache", "{breakpoints: on}", MODEL,
     'models[0].prompt_cache.breakpoints: must be one of off, auto, got "on"'),
    ("redaction", "on", MODEL, 'models[0].redaction: unknown redaction profile "on"'),
    ("ledger_journal", "on", STORE, "store.ledger_journal: must be auto, off or a directory"),
    ("ledger_journal", "true", STORE, "store.ledger_journal: must be auto, off or a directory"),
], ids=["affinity-on", "affinity-true", "continuation", "breakpoints-on", "redaction-on", "journal-on", "journal-true"])
def test_a_bare_on_where_only_off_is_a_value_names_the_word(key: str, value: str, where: str,
                                                             expected: str) -> None:
    """`on` is a word these options do not take: the error says so, not "must be str, got bool", and a
    journal never becomes a directory named "on"."""
    assert errors(key, value, where) == [expected]



@pytest.mark.parametrize(("value", "expected"), [("true", True), ("off", False), ("Yes", True), ("false", False)])
def test_a_boolean_written_as_a_variable_reads_as_the_word_would_bare(value: str, expected: bool) -> None:
    """`${FLAG}` interpolates to a string (docs/reference.md, "Config keys"): where a boolean is expected it
    reads as YAML reads the word bare, as `${PORT}` reads as a number."""
    doc = yaml.safe_load(DOC % "cache: {enabled: '${FLAG}'}")
    assert parse_config(doc, env={"FLAG": value}).cache.enabled is expected


def test_a_variable_that_is_no_boolean_word_is_still_an_error() -> None:
    doc = yaml.safe_load(DOC % "cache: {enabled: '${FLAG}'}")
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={"FLAG": "maybe"})
    assert info.value.errors == ["cache.enabled: must be bool, got str"]
