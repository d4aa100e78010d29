"""The optional dependencies a config needs (pyproject.toml's extras) and what to tell an operator when
they are missing or a cloud provider has no credentials (docs/cloud-providers.md, "Extras").

Without its extra a `bedrock` or `vertex` provider could not sign a single request, and every request
would look like an upstream authentication failure; so `check-config`, start-up and a reload name the
extra to install instead, in one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.providers.settings import ProviderConfig


@dataclass(frozen=True, slots=True)
class Extra:
    name: str  # the pyproject extra: `pip install 'llm-gateway[<name>]'`
    package: str  # the distribution it brings, as operators know it
    modules: tuple[str, ...]  # what the provider's signer imports


EXTRAS = {  # provider type -> the extra its requests need
    "bedrock": Extra("aws", "botocore", ("botocore.auth", "botocore.awsrequest", "botocore.credentials",
                                         "botocore.session")),
    "vertex": Extra("gcp", "google-auth", ("google.auth", "google.auth.transport.requests",
                                           "google.oauth2.service_account")),
}

CREDENTIALS_FIX = {  # provider type -> where its credentials come from (docs/cloud-providers.md)
    "bedrock": "give the provider aws_access_key_id and aws_secret_access_key, or credentials through the "
               "AWS default chain (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, web identity, an "
               "instance or task role), with bedrock:InvokeModel* on the model; see docs/cloud-providers.md",
    "vertex": "give the provider credentials_file, or Application Default Credentials "
              "(GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, the metadata "
              "server), with aiplatform.endpoints.predict on the project; see docs/cloud-providers.md",
}


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def missing_extras(providers: Iterable[ProviderConfig],
                   can_import: Callable[[str], bool] = importable) -> str | None:
    """One line naming every provider whose extra is not installed and the command that installs them
    all, or None when nothing is missing. Imports each needed module once (its signer will anyway)."""
    needs: dict[str, list[str]] = {}  # extra -> providers
    found: dict[str, bool] = {}
    for p in providers:
        extra = EXTRAS.get(p.type)
        if extra is None:
            continue
        if extra.name not in found:
            found[extra.name] = all(can_import(m) for m in extra.modules)
        if not found[extra.name]:
            needs.setdefault(extra.name, []).append(f'"{p.name}" ({p.type})')
    if not needs:
        return None
    by_name = {e.name: e for e in EXTRAS.values()}
    parts = [f"provider{'s' if len(names) > 1 else ''} {', '.join(names)} need{'' if len(names) > 1 else 's'} "
             f"{by_name[x].package}, which is not installed" for x, names in needs.items()]
    wanted = ",".join(needs)
    return (f"{'; '.join(parts)}: install the extra with pip install 'llm-gateway[{wanted}]' "
            f"(from a checkout: make run EXTRAS={wanted})")


def credentials_fix(provider: ProviderConfig) -> str:
    """The log line's `fix` for an upstream authentication failure of `provider`'s deployment: where its
    credentials come from. Names settings and variables, never a value."""
    fix = CREDENTIALS_FIX.get(provider.type)
    if fix is not None:
        return fix
    return f"check providers.{provider.name}.api_key (or its ${{VAR}}): the upstream refused it"
