"""The safety sections of the config: guardrails and redaction profiles (docs/reference.md, "Config keys")."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gateway.config.reader import Errors, Section, http_url_problem
from gateway.config.types import CustomRule, GuardrailConfig, RedactionProfile

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,62}$")


def guardrail(path: str, raw: Any, errs: Errors) -> GuardrailConfig:
    s = Section(raw, path, errs, ("name", "type", "terms", "patterns", "pattern", "url", "stage", "mode",
                                   "timeout_s"))
    gtype = s.choice("type", ("terms", "regex", "webhook"), "terms")
    patterns = s.strings("patterns") + ((s.get("pattern", str, ""),) if s.has("pattern") else ())
    for i, pat in enumerate(patterns):
        try:
            re.compile(pat)
        except re.error as exc:
            errs.add(f"{s.at('patterns')}[{i}]", f"invalid regular expression: {exc.msg}")
    g = GuardrailConfig(
        name=s.get("name", str, ""), type=gtype,  # type: ignore[arg-type]
        stage=s.choice("stage", ("input", "output", "both"), "output"),  # type: ignore[arg-type]
        mode=s.choice("mode", ("stream", "hold", "audit"), "stream"),  # type: ignore[arg-type]
        terms=s.strings("terms"), patterns=patterns, url=s.get("url", str, "") or None,
        timeout_s=s.number("timeout_s", 5.0, 0.001),
    )
    if not NAME.match(g.name):
        errs.add(s.at("name"), "required: letters, digits, _ . : - (max 63)")
    for i, term in enumerate(g.terms):
        if not term.strip():
            errs.add(f"{s.at('terms')}[{i}]", "must not be blank")
    if gtype == "terms" and not g.terms:
        errs.add(s.at("terms"), "at least one term is required for type terms")
    if gtype == "regex" and not g.patterns:
        errs.add(s.at("patterns"), "at least one pattern is required for type regex")
    if gtype == "webhook":
        problem = http_url_problem(g.url) if g.url else "required for type webhook: an http:// or https:// URL"
        if problem is not None:
            errs.add(s.at("url"), problem)
    return g


def profile(name: str, path: str, raw: Any, errs: Errors,
             validate_rule: Callable[[str], bool] | None) -> RedactionProfile:
    s = Section(raw, path, errs, ("rules", "custom", "scope", "inputs"))
    rules = s.strings("rules", ("secrets",))
    custom: list[CustomRule] = []
    for cpath, craw in s.items("custom"):
        c = Section(craw, cpath, errs, ("name", "pattern"))
        rule = CustomRule(name=c.get("name", str, ""), pattern=c.get("pattern", str, ""))
        if not NAME.match(rule.name):
            errs.add(c.at("name"), "required: letters, digits, _ . : - (max 63)")
        try:
            re.compile(rule.pattern)
            if not rule.pattern:
                errs.add(c.at("pattern"), "required")
        except re.error as exc:
            errs.add(c.at("pattern"), f"invalid regular expression: {exc.msg}")
        custom.append(rule)
    for i, rule in enumerate(custom):
        if validate_rule is not None and validate_rule(rule.name):
            errs.add(f"{s.at('custom')}[{i}].name", f'"{rule.name}" is a built-in rule name; choose another')
    for i, r in enumerate(rules):
        if validate_rule is not None and not validate_rule(r):
            errs.add(f"{s.at('rules')}[{i}]", f'unknown rule or rule set "{r}"')
    scope = s.strings("scope", ("content", "reasoning", "refusal"))
    for i, sc in enumerate(scope):
        if sc not in ("content", "reasoning", "refusal"):
            errs.add(f"{s.at('scope')}[{i}]", f'must be content, reasoning or refusal, got "{sc}"')
    return RedactionProfile(name=name, rules=rules, custom=tuple(custom), scope=scope,
                            inputs=s.get("inputs", bool, False))


def rule_validator() -> Callable[[str], bool] | None:
    """Rule names are defined by the redaction core; validate against it when it is present."""
    try:
        from gateway.core.redact.rules import is_known_rule
    except ImportError:  # pragma: no cover - the redaction core is part of the package
        return None
    return is_known_rule
