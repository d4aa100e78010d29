"""The config keys a reload cannot apply: read once at start (the listening sockets, the state backend,
the store, logging, the tracer), they keep their start values until a restart. A reload that changes
one says so by name (`reload_needs_restart`, docs/runbook.md), never with a value: a URL may carry a
password."""

from __future__ import annotations

from dataclasses import fields

from gateway.config.types import Config

# section -> its fields a reload does apply (the others are read at start only)
_APPLIED: dict[str, frozenset[str]] = {
    "state": frozenset({"response_owner_ttl_s", "workers"}),  # `workers` is `--workers`', not the file's
    "cache": frozenset({"enabled", "ttl_s"}),  # the sizes bound the backend built at start
    "logging": frozenset(),
    "telemetry": frozenset({"genai_metrics", "semconv_latest_experimental"}),
    "store": frozenset(),
}


def restart_keys(start: Config, new: Config) -> list[str]:
    """The keys whose value in `new` (a reloaded file) differs from what the process started with and
    keeps using. `start.file_listen`: the file's own listen values when `serve --host/--port/
    --metrics-port` replaced them, so a reload of an unchanged file names none of them."""
    host, port, metrics_port = start.file_listen or (start.server.host, start.server.port, start.server.metrics_port)
    keys = [f"server.{name}" for name, was in (("host", host), ("port", port), ("metrics_port", metrics_port))
            if getattr(new.server, name) != was]
    for section, applied in _APPLIED.items():
        old_s, new_s = getattr(start, section), getattr(new, section)
        keys += [f"{section}.{f.name}" for f in fields(old_s)
                 if f.name not in applied and getattr(old_s, f.name) != getattr(new_s, f.name)]
    return keys
