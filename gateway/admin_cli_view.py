"""What `gateway admin …` prints: answers as tables, failures as one line that says what to do
(docs/keys-teams-spend.md, "2. Create a team and a key"). Pure: the caller does the HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

EXAMPLE_URL = "http://127.0.0.1:8080"
# paths people paste from the SDK's base URL or the API's own routes; the CLI adds /admin/v1 itself
_WRONG_SUFFIXES = ("/admin/v1", "/v1/admin", "/admin", "/v1")
_DELETED = {"gateway.key.deleted": "revoked key", "gateway.team.deleted": "deleted team"}


@dataclass(frozen=True)
class Failure:
    """An answer that was not a success the CLI can print: its status and body."""

    status: int
    body: bytes


def diagnose_base_url(base: str) -> str | None:
    """Why GATEWAY_ADMIN_URL cannot be right before asking it anything, or None."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"GATEWAY_ADMIN_URL ({base}) must be the gateway's base URL, e.g. {EXAMPLE_URL}"
    path = parts.path.rstrip("/")
    for suffix in _WRONG_SUFFIXES:
        if path.endswith(suffix):
            fixed = urlunsplit((parts.scheme, parts.netloc, path[: -len(suffix)], "", ""))
            return (f"GATEWAY_ADMIN_URL ({base}) ends in {suffix}: set it to the gateway's base URL, {fixed} "
                    "(the command adds /admin/v1 itself)")
    return None


def is_prometheus_text(body: bytes) -> bool:
    head = body.lstrip()[:200]
    return head.startswith((b"# HELP ", b"# TYPE "))


def diagnose_failure(base: str, failure: Failure, metrics_probe: Callable[[], bytes | None]) -> str:
    """One line for a failed call: the gateway's own error (status, code, message), or what
    GATEWAY_ADMIN_URL points at when the answer is not the gateway's API."""
    error = _gateway_error(failure.body)
    if error is not None:
        return f"{failure.status} {error}"
    if is_prometheus_text(failure.body) or is_prometheus_text(metrics_probe() or b""):
        return (f"GATEWAY_ADMIN_URL ({base}) is the gateway's metrics port (server.metrics_port), which serves "
                f"/metrics only: point it at the API port (server.port), e.g. {EXAMPLE_URL}")
    return (f"GATEWAY_ADMIN_URL ({base}) answered {failure.status} with {_excerpt(failure.body)}, not the gateway's "
            f"admin API: point it at the gateway's API port (server.port), e.g. {EXAMPLE_URL}")


def _gateway_error(body: bytes) -> str | None:
    """`code: message (param: p)` from the OpenAI error shape the control plane answers in, else None."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return None
    line = f"{err.get('code') or err.get('type') or 'error'}: {err['message']}"
    if err.get("param"):
        line += f" (param: {err['param']})"
    if err.get("code") == "invalid_api_key":
        line += "; check GATEWAY_ADMIN_KEY (an admin key from admin.keys, never a gateway key)"
    return line


def _excerpt(body: bytes) -> str:
    text = " ".join(body.decode(errors="replace").split())
    if not text:
        return "an empty body"
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


# -- tables ---------------------------------------------------------------------------------------

def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(cell(v) for v in value) if value else "(none)"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":")) if value else "-"
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".")
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        seen.update(dict.fromkeys(k for k in r if k != "object"))
    return list(seen)


def render(answer: dict[str, Any]) -> str:
    """An answer of the admin API as text for a terminal: a list as a table, one object as fields."""
    kind = answer.get("object")
    if kind == "list":
        rows = [r for r in answer.get("data", []) if isinstance(r, dict)]
        return table(rows, _columns(rows)) if rows else "(none)"
    if isinstance(kind, str) and kind in _DELETED:
        return f"{_DELETED[kind]} {answer.get('name')}"
    fields = [k for k in answer if k not in ("object", "key")]
    width = max((len(k) for k in fields), default=0)
    lines = [f"{k.ljust(width)}  {cell(answer[k])}" for k in fields]
    if "key" in answer:  # the secret last and alone, so it is easy to copy; it is never shown again
        lines += ["", f"key: {answer['key']}", "(shown once: store it now)"]
    return "\n".join(lines)
