"""structlog configured once: JSON lines on stdout via orjson (console renderer when asked for, on a
TTY), request id from contextvars. Nothing here ever receives message text or a key."""

from __future__ import annotations

import logging
import os
import sys

import orjson
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


_INFO_ENABLED = True


def info_enabled() -> bool:
    """Whether info lines are written: the per-request line is built only when they are."""
    return _INFO_ENABLED


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    global _INFO_ENABLED
    _INFO_ENABLED = _LEVELS.get(level, logging.INFO) <= logging.INFO
    console = fmt == "console" and sys.stdout.isatty()
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _add_pid,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    if console:
        processors.append(structlog.dev.ConsoleRenderer())
        factory: structlog.typing.WrappedLogger = structlog.PrintLoggerFactory(sys.stdout)
    else:
        processors.append(structlog.processors.JSONRenderer(serializer=orjson.dumps))
        factory = structlog.BytesLoggerFactory(sys.stdout.buffer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )


def _add_pid(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """Which worker process wrote the line (`--workers N`)."""
    event["pid"] = os.getpid()
    return event
