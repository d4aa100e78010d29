"""`auth.jwt` (docs/identity.md): the IdP whose tokens the data plane accepts beside keys.

Group model lists name configured models, exactly or by glob (`claude-*`); each is expanded here, once,
against the models of the config, so a request only ever checks membership in a tuple.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.config.aliases import glob_match, is_glob
from gateway.config.reader import Section, http_url_problem
from gateway.config.types import JwtConfig, JwtGroup

JWT_KEYS = ("issuer", "audience", "jwks_url", "team_claim", "groups_claim", "groups", "leeway_s",
            "refetch_s", "refresh_s", "timeout_s")
_GROUP_KEYS = ("team", "models")


def _url(s: Section, key: str, required: bool) -> str | None:
    value = s.get(key, str, "").strip()
    if not value:
        if required:
            s.errs.add(s.at(key), "required")
        return None
    if http_url_problem(value) is not None:  # a bad port too: it failed only at the first fetch
        s.errs.add(s.at(key), "must be an http(s) URL with a host and a port from 1 to 65535")
    return value


def _models(s: Section, path: str, models: Iterable[str]) -> tuple[str, ...] | None:
    if not s.has("models"):
        return None
    names = tuple(models)
    out: dict[str, None] = {}
    for i, wanted in enumerate(s.strings("models")):
        matched = [m for m in names if glob_match(wanted, m)] if is_glob(wanted) else (
            [wanted] if wanted in names else [])
        if not matched:
            s.errs.add(f"{path}.models[{i}]", f'"{wanted[:128]}" names no configured model')
        out.update(dict.fromkeys(matched))
    return tuple(out)


def _group(path: str, name: str, raw: Any, s: Section, models: Iterable[str]) -> JwtGroup:
    g = Section(raw, path, s.errs, _GROUP_KEYS)
    team = g.get("team", str, "").strip() or None
    return JwtGroup(group=name, team=team, models=_models(g, path, models))


def jwt_config(s: Section, models: Iterable[str]) -> JwtConfig | None:
    if not s.raw:
        return None
    d = JwtConfig(issuer="", audience="")
    issuer = _url(s, "issuer", True) or ""
    audience = s.get("audience", str, "").strip()
    if not audience:
        s.errs.add(s.at("audience"), "required: the audience (aud) your IdP puts in the gateway's tokens")
    names = tuple(models)
    raw_groups = s.get("groups", dict, {})
    groups = tuple(_group(f"{s.at('groups')}.{name}", str(name), raw, s, names) for name, raw in raw_groups.items())
    if not groups:
        s.errs.add(s.at("groups"), "required: map at least one IdP group to a team and models")
    return JwtConfig(
        issuer=issuer, audience=audience, jwks_url=_url(s, "jwks_url", False),
        team_claim=s.get("team_claim", str, "").strip() or None,
        groups_claim=s.get("groups_claim", str, d.groups_claim).strip() or d.groups_claim,
        groups=groups, leeway_s=s.number("leeway_s", d.leeway_s),
        refetch_s=s.number("refetch_s", d.refetch_s, 1.0), refresh_s=s.number("refresh_s", d.refresh_s, 1.0),
        timeout_s=s.number("timeout_s", d.timeout_s, 0.1),
    )
