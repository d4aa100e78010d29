"""`gateway admin …`: the control plane's API from a shell (CONTRACT §11).

Reads GATEWAY_ADMIN_URL (the gateway's base URL, e.g. http://127.0.0.1:8080) and GATEWAY_ADMIN_KEY, its
own inputs; prints the API's JSON answer. A plain HTTP client (urllib): an operator's tool, not part of
the serving process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

PAGE = 1000  # rows a list request asks for: the API's largest page


def add_parser(sub: Any) -> None:
    a = sub.add_parser("admin", help="drive the control plane API (GATEWAY_ADMIN_URL, GATEWAY_ADMIN_KEY)")
    asub = a.add_subparsers(dest="admin_command", required=True)
    keys = asub.add_parser("keys", help="gateway keys").add_subparsers(dest="keys_command", required=True)
    c = keys.add_parser("create", help="create a key; prints its secret once")
    c.add_argument("name")
    _limit_args(c)
    c.add_argument("--team")
    c.add_argument("--expires-at", help="ISO 8601 time, e.g. 2026-12-31T00:00:00Z")
    keys.add_parser("list", help="list keys (no secrets)")
    r = keys.add_parser("revoke", help="revoke a key now")
    r.add_argument("name")
    ro = keys.add_parser("rotate", help="a new secret; the old one works --grace-s longer")
    ro.add_argument("name")
    ro.add_argument("--grace-s", type=float, default=0.0)
    teams = asub.add_parser("teams", help="teams").add_subparsers(dest="teams_command", required=True)
    tc = teams.add_parser("create", help="create a team")
    tc.add_argument("name")
    _limit_args(tc)
    teams.add_parser("list", help="list teams")
    s = asub.add_parser("spend", help="spend by key, team, model, deployment, day")
    s.add_argument("--group-by", default="team", help="comma-separated: key,team,model,deployment,day")
    s.add_argument("--from", dest="day_from", help="YYYY-MM-DD (inclusive)")
    s.add_argument("--to", dest="day_to", help="YYYY-MM-DD (inclusive)")
    asub.add_parser("audit", help="the audit log of admin actions")


def _limit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", help="comma-separated model names")
    p.add_argument("--rpm", type=int)
    p.add_argument("--tpm", type=int)
    p.add_argument("--budget-usd", type=float)
    p.add_argument("--budget-period", choices=("day", "month"))


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"models": args.models.split(",") if args.models else None, "rpm": args.rpm,
                           "tpm": args.tpm, "budget_usd": args.budget_usd, "budget_period": args.budget_period}
    return {k: v for k, v in out.items() if v is not None}


def request_for(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """The method, path and body that an `admin` command sends."""
    cmd = args.admin_command
    if cmd == "keys":
        k = args.keys_command
        if k == "create":
            body = {"name": args.name, **_limits(args)}
            body.update({f: v for f, v in (("team", args.team), ("expires_at", args.expires_at)) if v})
            return "POST", "/admin/v1/keys", body
        if k == "list":
            return "GET", "/admin/v1/keys", None
        if k == "revoke":
            return "DELETE", f"/admin/v1/keys/{quote(args.name, safe='')}", None
        return "POST", f"/admin/v1/keys/{quote(args.name, safe='')}/rotate", {"grace_s": args.grace_s}
    if cmd == "teams":
        if args.teams_command == "create":
            return "POST", "/admin/v1/teams", {"name": args.name, **_limits(args)}
        return "GET", "/admin/v1/teams", None
    if cmd == "spend":
        q = {"group_by": args.group_by, "from": args.day_from, "to": args.day_to}
        return "GET", "/admin/v1/spend?" + urlencode({k: v for k, v in q.items() if v}), None
    return "GET", "/admin/v1/audit", None


def all_pages(call: Callable[[str], Any], url: str, page_size: int = PAGE) -> Any:
    """A list answer with every page's rows in `data`: lists come a page at a time, the next one `after`
    the last name (keys, teams) or id (audit) of the one before (docs/keys-teams-spend.md, "Lists")."""
    if not url.endswith(("/keys", "/teams", "/audit")):
        return call(url)
    answer = call(f"{url}?limit={page_size}")
    rows: list[Any] = list(answer.get("data") or [])
    while answer.get("has_more") and answer.get("data"):
        last = answer["data"][-1]
        after = last["id"] if url.endswith("/audit") else last["name"]
        answer = call(f"{url}?limit={page_size}&after={quote(str(after), safe='')}")
        rows.extend(answer.get("data") or [])
    return {**answer, "data": rows, "has_more": False}


def run(args: argparse.Namespace, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ) if env is None else env
    base, key = env.get("GATEWAY_ADMIN_URL", "").rstrip("/"), env.get("GATEWAY_ADMIN_KEY", "")
    if not base or not key:
        print("gateway admin: set GATEWAY_ADMIN_URL and GATEWAY_ADMIN_KEY", file=sys.stderr)
        return 2
    method, path, body = request_for(args)
    data = json.dumps(body).encode() if body is not None else None

    def call(url: str) -> Any:
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")

    try:
        answer = all_pages(call, base + path) if method == "GET" else call(base + path)
    except urllib.error.HTTPError as exc:
        print(exc.read().decode(errors="replace"), file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"gateway admin: cannot reach {base}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0
