"""`gateway admin …`: the control plane's API from a shell (docs/keys-teams-spend.md).

Reads GATEWAY_ADMIN_URL (the gateway's base URL, e.g. http://127.0.0.1:8080) and GATEWAY_ADMIN_KEY (or
GATEWAY_ADMIN_TOKEN, which wins), its own inputs; prints the answer as a table, or its JSON with `--json`.
A plain HTTP client (urllib): an operator's tool, not part of the serving process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from gateway.admin_cli_view import Failure, diagnose_base_url, diagnose_failure, render

LIMITS = ("models", "rpm", "tpm", "budget_usd", "budget_period")
KEY_CLEARABLE = (*LIMITS, "team", "expires_at")
PAGE = 1000  # rows a list request asks for: the API's largest page


def add_parser(sub: Any) -> None:
    a = sub.add_parser("admin", help="drive the control plane API (GATEWAY_ADMIN_URL, GATEWAY_ADMIN_KEY)")
    asub = a.add_subparsers(dest="admin_command", required=True)
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="print the API's JSON answer instead of a table")
    keys = _object_commands(asub, out, KEYS)
    keys.add_parser("revoke", parents=[out], help="revoke a key now").add_argument("name")
    ro = keys.add_parser("rotate", parents=[out], help="a new secret; the old one works --grace-s longer")
    ro.add_argument("name")
    ro.add_argument("--grace-s", type=float, default=0.0)
    teams = _object_commands(asub, out, TEAMS)
    teams.add_parser("delete", parents=[out], help="delete a team that has no keys").add_argument("name")
    s = asub.add_parser("spend", parents=[out], help="spend by key, team, model, deployment, day")
    s.add_argument("--group-by", default="team", help="comma-separated: key,team,model,deployment,day")
    s.add_argument("--from", dest="day_from", help="YYYY-MM-DD (inclusive)")
    s.add_argument("--to", dest="day_to", help="YYYY-MM-DD (inclusive)")
    asub.add_parser("audit", parents=[out], help="the audit log of admin actions")


def _limit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", help="comma-separated model names")
    p.add_argument("--rpm", type=int)
    p.add_argument("--tpm", type=int)
    p.add_argument("--budget-usd", type=float)
    p.add_argument("--budget-period", choices=("day", "month"))


def _key_args(p: argparse.ArgumentParser) -> None:
    _limit_args(p)
    p.add_argument("--team")
    p.add_argument("--expires-at", help="ISO 8601 time, e.g. 2026-12-31T00:00:00Z")
    p.add_argument("--metadata", type=_json_object, help='a JSON object, e.g. \'{"owner": "alice@example.com"}\'')


def _clear_arg(p: argparse.ArgumentParser, fields: tuple[str, ...]) -> None:
    p.add_argument("--clear", type=_field_list(fields), default=[],
                   help=f"comma-separated fields to remove (set to null): {','.join(fields)}")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not valid JSON") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"owner\": \"alice\"}'")
    return value


def _field_list(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        fields = [f.strip() for f in text.split(",") if f.strip()]
        unknown = [f for f in fields if f not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown field {unknown[0]!r} (one of {', '.join(allowed)})")
        return fields
    return parse


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"models": args.models.split(",") if args.models else None, "rpm": args.rpm,
                           "tpm": args.tpm, "budget_usd": args.budget_usd, "budget_period": args.budget_period}
    return {k: v for k, v in out.items() if v is not None}


def _key_body(args: argparse.Namespace) -> dict[str, Any]:
    body = _limits(args)
    body.update({f: v for f, v in (("team", args.team), ("expires_at", args.expires_at)) if v})
    if args.metadata is not None:
        body["metadata"] = args.metadata
    return body


@dataclass(frozen=True)
class Objects:
    """A kind of control-plane object that `gateway admin` creates, lists, reads and updates alike: its
    subcommand, its collection's path, the options of its body (create and update), the fields
    `update --clear` may remove, and each common command's help."""

    command: str
    path: str
    options: Callable[[argparse.ArgumentParser], None]
    body: Callable[[argparse.Namespace], dict[str, Any]]
    clearable: tuple[str, ...]
    helps: dict[str, str]


KEYS = Objects("keys", "/admin/v1/keys", _key_args, _key_body, KEY_CLEARABLE, {
    "": "gateway keys", "create": "create a key; prints its secret once", "list": "list keys (no secrets)",
    "get": "read one key (no secret)", "update": "change a key's limits, team, expiry or metadata"})
TEAMS = Objects("teams", "/admin/v1/teams", _limit_args, _limits, LIMITS, {
    "": "teams", "create": "create a team", "list": "list teams", "get": "read one team",
    "update": "change a team's limits"})
OBJECTS = {kind.command: kind for kind in (KEYS, TEAMS)}


def _object_commands(asub: Any, out: argparse.ArgumentParser, kind: Objects) -> Any:
    """`gateway admin <kind> create|list|get|update`; the caller adds the kind's own commands."""
    sub = asub.add_parser(kind.command, help=kind.helps[""]).add_subparsers(dest=kind.command + "_command",
                                                                             required=True)
    for verb in ("create", "list", "get", "update"):
        p = sub.add_parser(verb, parents=[out], help=kind.helps[verb])
        if verb != "list":
            p.add_argument("name")
        if verb in ("create", "update"):
            kind.options(p)
        if verb == "update":
            _clear_arg(p, kind.clearable)
    return sub


def _object_request(kind: Objects, args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """The request of a command every kind of object has (create, list, get, update), else of its own:
    a key's revoke or rotate, a team's delete."""
    verb, path = getattr(args, kind.command + "_command"), kind.path
    if verb == "create":
        return "POST", path, {"name": args.name, **kind.body(args)}
    if verb == "list":
        return "GET", path, None
    one = f"{path}/{quote(args.name, safe='')}"
    if verb == "get":
        return "GET", one, None
    if verb == "update":
        return "PATCH", one, {**kind.body(args), **{f: None for f in args.clear}}
    if verb == "rotate":
        return "POST", one + "/rotate", {"grace_s": args.grace_s}
    return "DELETE", one, None  # a key's revoke, a team's delete


def request_for(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """The method, path and body that an `admin` command sends."""
    cmd = args.admin_command
    if cmd in OBJECTS:
        return _object_request(OBJECTS[cmd], args)
    if cmd == "spend":
        q = {"group_by": args.group_by, "from": args.day_from, "to": args.day_to}
        return "GET", "/admin/v1/spend?" + urlencode({k: v for k, v in q.items() if v}), None
    return "GET", "/admin/v1/audit", None


def _credential(env: dict[str, str]) -> str:
    return env.get("GATEWAY_ADMIN_TOKEN", "") or env.get("GATEWAY_ADMIN_KEY", "")


def _metrics_page(base: str) -> bytes | None:
    """What `base`/metrics answers: a gateway's metrics port serves Prometheus text there."""
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
            body: bytes = resp.read(4096)
            return body
    except (urllib.error.URLError, OSError):
        return None


def _call(base: str, credential: str, args: argparse.Namespace) -> dict[str, Any] | Failure:
    """The command's answer (a list with every page's rows), or the status and body of a failure;
    raises OSError when unreachable."""
    method, path, body = request_for(args)
    data = json.dumps(body).encode() if body is not None else None

    def call(url: str) -> dict[str, Any] | Failure:
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {credential}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            return Failure(exc.code, exc.read())
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            return Failure(200, raw)
        return answer if isinstance(answer, dict) else Failure(200, raw)

    return all_pages(call, base + path) if method == "GET" else call(base + path)


def all_pages(call: Callable[[str], dict[str, Any] | Failure], url: str,
              page_size: int = PAGE) -> dict[str, Any] | Failure:
    """A list answer with every page's rows in `data`: lists come a page at a time, the next one `after`
    the last name (keys, teams) or id (audit) of the one before (docs/keys-teams-spend.md, "Lists")."""
    if not url.endswith(("/keys", "/teams", "/audit")):
        return call(url)
    answer = call(f"{url}?limit={page_size}")
    rows: list[Any] = []
    while not isinstance(answer, Failure):
        page = answer.get("data")
        rows.extend(page if isinstance(page, list) else [])
        if not answer.get("has_more") or not page:
            return {**answer, "data": rows, "has_more": False}
        after = page[-1].get("id") if url.endswith("/audit") else page[-1].get("name")
        answer = call(f"{url}?limit={page_size}&after={quote(str(after), safe='')}")
    return answer


def run(args: argparse.Namespace, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ) if env is None else env
    base, credential = env.get("GATEWAY_ADMIN_URL", "").strip().rstrip("/"), _credential(env)
    if not base or not credential:
        print("gateway admin: set GATEWAY_ADMIN_URL and GATEWAY_ADMIN_KEY (or GATEWAY_ADMIN_TOKEN)", file=sys.stderr)
        return 2
    wrong = diagnose_base_url(base)
    if wrong:
        print(f"gateway admin: {wrong}", file=sys.stderr)
        return 2
    try:
        answer = _call(base, credential, args)
    except (urllib.error.URLError, OSError) as exc:
        print(f"gateway admin: cannot reach {base}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 1
    if isinstance(answer, Failure):
        print(f"gateway admin: {diagnose_failure(base, answer, lambda: _metrics_page(base))}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2) if args.json else render(answer))
    return 0
