"""The control plane's config (CONTRACT §2, §11): `admin.keys` and `store`.

Admin keys are kept as SHA-256 digests only; a digest that is also a gateway key's is a config error, so
a gateway key is never an admin key and an admin key never a gateway key.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gateway.config.reader import Errors, Section
from gateway.config.safety_config import NAME
from gateway.config.types import AdminConfig, AdminKey, AuthConfig, StoreConfig

STORE_KEYS = ("url", "poll_s", "ledger_wait_s", "connect_timeout_s", "ledger_journal")
_URL = re.compile(r"^(sqlite:///.+|postgres(ql)?://.+)$")


def digest_hex(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_identity(s: Section, path: str) -> tuple[str, str, str]:
    """A key entry's `name` and its secret, given as exactly one of `key` or `key_sha256`:
    (name, key, digest), the one not given empty. A gateway key and an admin key read alike."""
    name = s.get("name", str, "")
    if not NAME.match(name):
        s.errs.add(s.at("name"), "required: letters, digits, _ . : - (max 63)")
    key, digest = s.get("key", str, ""), s.get("key_sha256", str, "").lower()
    # a `${NAME}` left unset is given, and already one error (docs/reference.md, Commands)
    given_unset = s.errs.unset(s.at("key")) or s.errs.unset(s.at("key_sha256"))
    if bool(key) == bool(digest) and not given_unset:
        s.errs.add(path, "exactly one of key or key_sha256 is required")
    if digest and not re.fullmatch(r"[0-9a-f]{64}", digest):
        s.errs.add(s.at("key_sha256"), "must be 64 hex characters")
    return name, key, digest


def _admin_key(path: str, raw: Any, errs: Errors) -> AdminKey:
    name, key, digest = key_identity(Section(raw, path, errs, ("name", "key", "key_sha256")), path)
    return AdminKey(name=name, key_sha256=digest or digest_hex(key))


def admin_config(s: Section, auth: AuthConfig) -> AdminConfig:
    """`admin.keys`; refuses a secret used twice, or used as a gateway key too (named by path only)."""
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
    return AdminConfig(keys=keys)


def store_config(s: Section, admin: AdminConfig) -> StoreConfig:
    d = StoreConfig()
    url = s.get("url", str, "") or None
    if url is not None and not _URL.match(url):
        s.errs.add(s.at("url"), "must be sqlite:///<path> or postgresql://user:pass@host:port/db")
    if url is None and admin.keys:
        s.errs.add(s.at("url"), "required with admin.keys: the control plane keeps keys in the store")
    journal = s.get("ledger_journal", str, d.ledger_journal).strip()
    if not journal:
        s.errs.add(s.at("ledger_journal"), "must be auto, off or a directory")
    return StoreConfig(url=url, poll_s=s.number("poll_s", d.poll_s, 0.05),
                       ledger_wait_s=s.number("ledger_wait_s", d.ledger_wait_s, 0.01),
                       connect_timeout_s=s.number("connect_timeout_s", d.connect_timeout_s, 0.1),
                       ledger_journal=journal or d.ledger_journal)
