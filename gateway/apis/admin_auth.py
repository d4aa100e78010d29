"""Who calls the control plane, and with which role (docs/identity.md, "Admin roles").

A bearer credential is, in this order: an admin key of the config (`admin.keys`, with its `role`), an
IdP token whose groups map to a role through `admin.jwt_groups` (verified as on the data plane, by
`auth.jwt`), or an admin key kept in the store (`/admin/v1/admin-keys`). A gateway key is never an
admin credential.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import cast

from gateway.config.types import Config
from gateway.core.policy.identity import looks_like_jwt
from gateway.core.policy.roles import AdminPrincipal, Role, strongest
from gateway.errors import GatewayError, InvalidApiKey, NotFound, PermissionDenied
from gateway.pipeline.jwt_auth import JwtAuth, SigningKeyUnknown
from gateway.store import ControlPlane
from gateway.store.types import StoreUnavailable

# what every admin key the store holds starts with (`admin_scope.create_admin_key` makes them): a credential
# without it is none of them, and is refused without a store lookup (a flood of made-up credentials would
# otherwise be a query each on the connection the key sync shares)
STORED_ADMIN_KEY_PREFIX = "sk-gw-admin-"


class StoreDown(GatewayError):
    status, type, code, outcome = 503, "api_error", "store_unavailable", "upstream_error"


def store_down(control: ControlPlane, exc: Exception) -> StoreDown:
    """The store's outage as the control plane answers it (counted in `llm_gateway_store_errors_total`)."""
    control.hooks.error("admin")
    return StoreDown(str(exc))


async def control_plane(config: Config, control: ControlPlane | None) -> ControlPlane:
    """The control plane, or the 404 of one that is off. It is on with a store and any admin credential
    that can exist: config admin keys, `admin.jwt_groups`, or admin keys kept in the store. The API and
    the console (`/admin/`, docs/console.md) both ask here, so one is never on without the other."""
    if control is None or not (config.admin.enabled or await _stored_admins(control)):
        raise NotFound("the control plane is off: configure admin.keys (or admin.jwt_groups) and store.url")
    return control


async def _stored_admins(control: ControlPlane) -> bool:
    """Whether the store holds an admin key. A store that cannot say is an outage (503), not a control
    plane that is off: its stored admin keys may turn it on (docs/identity.md, "Admin roles")."""
    try:
        return await control.store.admin_keys.any()
    except StoreUnavailable as exc:
        raise store_down(control, exc) from None


def bearer(headers: Mapping[str, str]) -> str:
    scheme, _, value = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise InvalidApiKey("missing admin credential: send Authorization: Bearer <admin key or token>")
    return value.strip()


async def admin_principal(config: Config, jwt: JwtAuth | None, control: ControlPlane,
                          headers: Mapping[str, str]) -> AdminPrincipal:
    credential = bearer(headers)
    digest = hashlib.sha256(credential.encode()).digest()
    for k in config.admin.keys:
        if hmac.compare_digest(bytes.fromhex(k.key_sha256), digest):
            return AdminPrincipal(k.name, k.role, k.team, "config_key")
    if jwt is not None and config.admin.jwt_groups and looks_like_jwt(credential):
        return await _token_principal(config, jwt, credential)
    if not credential.startswith(STORED_ADMIN_KEY_PREFIX):
        raise InvalidApiKey("invalid admin credential")
    try:  # read on each request (never cached): with the store down, no credential of it can be told apart
        stored = await control.store.admin_keys.find(digest.hex())
    except StoreUnavailable as exc:
        raise store_down(control, exc) from None
    if stored is not None:
        return AdminPrincipal(stored.name, cast(Role, stored.role), stored.team, "stored_key")
    raise InvalidApiKey("invalid admin credential")


async def _token_principal(config: Config, jwt: JwtAuth, token: str) -> AdminPrincipal:
    try:
        claims = jwt.claims(token)
    except SigningKeyUnknown:  # as on the data plane: the refetch, or the one in flight, may bring the key
        claims = await jwt.after_refetch(lambda: jwt.claims(token))
    held = set(jwt.groups(claims))
    grant = strongest((g.role, g.team) for g in config.admin.jwt_groups if g.group in held)
    if grant is None:
        denied = PermissionDenied("this token's groups grant no admin role")
        denied.reason = "jwt_no_admin_group"
        raise denied
    sub = claims.get("sub")
    return AdminPrincipal(sub if isinstance(sub, str) and sub else "jwt", grant[0], grant[1], "jwt")
