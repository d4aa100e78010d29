"""The control plane's config (docs/reference.md, "Config keys"; docs/keys-teams-spend.md): `admin.keys` and `store`.

Admin keys are kept as SHA-256 digests only; a digest that is also a gateway key's is a config error, so
a gateway key is never an admin key and an admin key never a gateway key.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, cast

from gateway.config.reader import Errors, Section
from gateway.config.safety_config import NAME
from gateway.config.types import (
    ADMIN_ROLES,
    AdminConfig,
    AdminJwtGroup,
    AdminKey,
    AdminRole,
    AuthConfig,
    StoreConfig,
)

STORE_KEYS = ("url", "poll_s", "ledger_wait_s", "connect_timeout_s", "ledger_journal")
IDP_PREFIX = "jwt:"  # the names of IdP callers, never a configured key's
_URL = re.compile(r"^(sqlite:///.+|postgres(ql)?://.+)$")


def digest_hex(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_identity(s: Section, path: str) -> tuple[str, str, str]:
    """A key entry's `name` and its secret, given as exactly one of `key` or `key_sha256`:
    (name, key, digest), the one not given empty. A gateway key and an admin key read alike."""
    name = s.get("name", str, "")
    if not NAME.match(name):
        s.errs.add(s.at("name"), "required: letters, digits, _ . : - (max 63)")
    elif name.lower().startswith(IDP_PREFIX):
        # an IdP token's principal is `jwt:<team>` (pipeline.jwt_auth): a key so named would count its
        # limits, spend, cached answers and response ids as that team's, and an admin key would read as
        # an IdP admin in the audit (apis.admin)
        s.errs.add(s.at("name"), f"{IDP_PREFIX} names IdP callers (jwt:<team>): choose another name")
    key, digest = s.get("key", str, ""), s.get("key_sha256", str, "").lower()
    # a `${NAME}` left unset is given, and already one error (docs/reference.md, Commands)
    given_unset = s.errs.unset(s.at("key")) or s.errs.unset(s.at("key_sha256"))
    if bool(key) == bool(digest) and not given_unset:
        s.errs.add(path, "exactly one of key or key_sha256 is required")
    if digest and not re.fullmatch(r"[0-9a-f]{64}", digest):
        s.errs.add(s.at("key_sha256"), "must be 64 hex characters")
    return name, key, digest


ADMIN_KEYS = ("keys", "jwt_groups", "console")


def _role(s: Section, path: str) -> tuple[AdminRole, str | None]:
    """`role` (default admin) and `team`: a team_admin needs its team; the other roles take none."""
    role = cast(AdminRole, s.choice("role", ADMIN_ROLES, "admin"))
    team = s.get("team", str, "").strip() or None
    if role == "team_admin" and team is None:
        s.errs.add(s.at("team"), "required for role team_admin: the team it manages")
    if role != "team_admin" and team is not None:
        s.errs.add(s.at("team"), f"only a team_admin has a team (role is {role})")
    return role, team


def _admin_key(path: str, raw: Any, errs: Errors) -> AdminKey:
    s = Section(raw, path, errs, ("name", "key", "key_sha256", "role", "team"))
    name, key, digest = key_identity(s, path)
    role, team = _role(s, path)
    return AdminKey(name=name, key_sha256=digest or digest_hex(key), role=role, team=team)


def _jwt_group(s: Section, group: str, raw: Any) -> AdminJwtGroup:
    path = f"{s.at('jwt_groups')}.{group}"
    if isinstance(raw, str):  # `platform-admins: admin`
        raw = {"role": raw}
    role, team = _role(Section(raw, path, s.errs, ("role", "team")), path)
    return AdminJwtGroup(group=group, role=role, team=team)


def admin_config(s: Section, auth: AuthConfig) -> AdminConfig:
    """`admin.keys`, `admin.jwt_groups`, `admin.console`; refuses a secret used twice, or used as a
    gateway key too (named by path only)."""
    groups = tuple(_jwt_group(s, str(g), raw) for g, raw in s.get("jwt_groups", dict, {}).items())
    if groups and auth.jwt is None:
        s.errs.add(s.at("jwt_groups"), "needs auth.jwt: the IdP whose tokens carry these groups")
    console = Section(s.raw.get("console"), s.at("console"), s.errs, ("oidc_client_id",))
    client_id = console.get("oidc_client_id", str, "").strip() or None
    if client_id is not None and auth.jwt is None:
        console.errs.add(console.at("oidc_client_id"), "needs auth.jwt: the console signs in through that IdP")
    keys = tuple(_admin_key(p, raw, s.errs) for p, raw in s.items("keys"))
    gateway = {k.key_sha256 or digest_hex(k.key or "") for k in auth.keys if k.key_sha256 or k.key}
    seen_names: set[str] = set()
    seen: set[str] = set()
    for i, k in enumerate(keys):
        path = f"{s.at('keys')}[{i}]"
        if k.name in seen_names:
            s.errs.add(f"{path}.name", f'duplicate admin key name "{k.name}"')
        seen_names.add(k.name)
        if s.errs.unset(f"{path}.key") or s.errs.unset(f"{path}.key_sha256"):
            continue  # its secret is unknown: nothing to compare, and its one error is out
        if k.key_sha256 in gateway:
            s.errs.add(path, "this admin key is also a gateway key (auth.keys): use different secrets")
        if k.key_sha256 in seen:
            s.errs.add(path, "duplicate admin key secret")
        seen.add(k.key_sha256)
    return AdminConfig(keys=keys, jwt_groups=groups, console_oidc_client_id=client_id)


def store_config(s: Section, admin: AdminConfig) -> StoreConfig:
    d = StoreConfig()
    url = s.get("url", str, "") or None
    if url is not None and not _URL.match(url):
        s.errs.add(s.at("url"), "must be sqlite:///<path> or postgresql://user:pass@host:port/db")
    if url is None and admin.enabled:
        s.errs.add(s.at("url"), "required with admin.keys or admin.jwt_groups: the control plane keeps keys "
                                "in the store")
    journal = s.word("ledger_journal", d.ledger_journal).strip()
    if journal in ("", "on"):  # `on` (or a bare `true`) names no directory: the setting is auto, off or one
        s.errs.add(s.at("ledger_journal"), "must be auto, off or a directory")
    return StoreConfig(url=url, poll_s=s.number("poll_s", d.poll_s, 0.05),
                       ledger_wait_s=s.number("ledger_wait_s", d.ledger_wait_s, 0.01),
                       connect_timeout_s=s.number("connect_timeout_s", d.connect_timeout_s, 0.1),
                       ledger_journal=journal or d.ledger_journal)
