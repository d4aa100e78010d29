"""`gateway serve | check-config | version` (docs/reference.md, "Commands"). Nothing happens at import time."""

from __future__ import annotations

import argparse
import asyncio
import sys

import structlog

from gateway import __version__
from gateway.config import ConfigError, config_path_from_env, embedded_default, load_config, with_listen_overrides
from gateway.config.extras import missing_extras
from gateway.config.types import Config
from gateway.errors import StartupError, say_on_stderr
from gateway.observe.logs import configure_logging
from gateway.workers import install_uvloop

log = structlog.get_logger("gateway")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gateway", description="OpenAI-protocol LLM gateway")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the gateway")
    s.add_argument("--config", help="config file (default: $GATEWAY_CONFIG, else the embedded demo)")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--metrics-port", type=int)
    s.add_argument("--workers", type=int, default=1)
    c = sub.add_parser("check-config", help="validate a config file")
    c.add_argument("path")
    sub.add_parser("version", help="print the version")
    m = sub.add_parser("migrate", help="apply the store's schema migrations (store.url) and exit")
    m.add_argument("--config", help="config file (default: $GATEWAY_CONFIG)")
    from gateway.admin_cli import add_parser

    add_parser(sub)
    return p


def compile_check(config: Config) -> list[str]:
    """What only compiling reveals (rule sets, provider types); empty when fine."""
    from gateway.pipeline.safety import compile_safety
    from gateway.providers.registry import build_translators

    try:
        build_translators(config.providers)
        compile_safety(config)
    except ValueError as exc:
        return [str(exc)]
    return []


def _invalid(errors: list[str]) -> int:
    for line in errors:
        print(line, file=sys.stderr)
    return 2


def _missing_extras(config: Config) -> int | None:
    """An extra a provider needs is not installed: one line that names it, exit 1 from `serve`
    (docs/cloud-providers.md, "Extras"); else None."""
    line = missing_extras(config.providers.values())
    if line is None:
        return None
    print(f"gateway: {line}", file=sys.stderr)
    return 1


def check_config(path: str) -> int:
    try:
        config = load_config(path)
    except ConfigError as exc:
        return _invalid(exc.errors)
    errors = compile_check(config)
    if errors:
        return _invalid(errors)
    missing = missing_extras(config.providers.values())
    if missing is not None:  # valid all the same: `serve` and a reload need the extra, the file does not
        # (docs/cloud-providers.md, "Extras")
        print(f"gateway: warning: {missing}; serve refuses to start until it is installed", file=sys.stderr)
    print(f"{path}: valid ({len(config.models)} models, {len(config.providers)} providers)")
    return 0


def _load(args: argparse.Namespace) -> Config:
    path = config_path_from_env(args.config)
    config = load_config(path) if path else embedded_default()
    errors = compile_check(config)
    if errors:
        raise ConfigError(errors)
    return with_listen_overrides(config, args.host, args.port, args.metrics_port)


def serve(args: argparse.Namespace) -> int:
    try:
        config = _load(args)
    except ConfigError as exc:
        return _invalid(exc.errors)
    missing = _missing_extras(config)
    if missing is not None:
        return missing
    configure_logging(config.logging.level, config.logging.format)
    if config.is_demo:
        log.warning("demo_mode", message="no config given: serving the built-in demo model 'demo' from the "
                    "mock provider on 127.0.0.1 without auth; pass --config for real providers")
    path = config_path_from_env(args.config)
    try:
        return _run(config, path, args.workers)
    except ConfigError as exc:  # what only the store reveals: a key that clashes with a stored one
        return _invalid(exc.errors)
    except StartupError as exc:  # one line, no traceback: a port in use, a certificate that does not load
        say_on_stderr(f"gateway: {exc}")
        return 1


def _run(config: Config, path: str | None, workers: int) -> int:
    if workers > 1:
        from gateway.workers import run_workers

        return run_workers(config, path, workers)
    install_uvloop()
    from gateway.server import run_server

    return asyncio.run(run_server(config, path, serve_api=True, serve_metrics=True, reuse_port=False))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "check-config":
        return check_config(args.path)
    if args.command == "migrate":
        return migrate(args.config)
    if args.command == "admin":
        from gateway.admin_cli import run

        return run(args)
    return serve(args)


def migrate(config_path: str | None) -> int:
    """`gateway migrate`: for operators who run migrations as a job before the gateways start."""
    path = config_path_from_env(config_path)
    if path is None:
        print("gateway migrate: give --config (or GATEWAY_CONFIG)", file=sys.stderr)
        return 2
    try:
        config = load_config(path)
    except ConfigError as exc:
        return _invalid(exc.errors)
    url = config.store.url
    if url is None:
        print(f"gateway migrate: {path} sets no store.url", file=sys.stderr)
        return 2
    from gateway.store import Store, StoreError
    from gateway.store.migrations import LATEST

    async def run() -> list[int]:
        store = await Store.open(url, config.store.connect_timeout_s)
        try:
            return await store.migrate()
        finally:
            await store.close()

    try:
        applied = asyncio.run(run())
    except StoreError as exc:  # unreachable, or a migration's data refused: a message, not a traceback
        print(f"gateway migrate: {exc}", file=sys.stderr)
        return 1
    print(f"applied {', '.join(map(str, applied))}" if applied else "nothing to apply", f"(schema version {LATEST})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
