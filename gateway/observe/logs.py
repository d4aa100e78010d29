"""structlog configured once: JSON lines on stdout via orjson (console renderer when asked for, on a
TTY), request id from contextvars. Nothing here ever receives message text or a key.

The per-request line (`write_info`) runs the configured processors itself: structlog's bound logger
(the lazy proxy, the level's method, the keyword arguments copied three times) cost more than the
processors and the write together: 20-30 µs of each request's CPU at level info (docs/overhead.md)."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

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
        _utc_timestamp,
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


def write_info(event: str, fields: dict[str, Any]) -> None:
    """`log.info(event, **fields)`, for a line written once a request: the processors configured now
    (a test's `capture_logs` among them), then the configured logger's `msg`. `fields` becomes the line.
    Nothing is written below level info (the caller need not build the line then: `info_enabled`)."""
    if not _INFO_ENABLED:
        return
    config = structlog.get_config()
    logger = config["logger_factory"]()  # per line, as structlog's uncached loggers: a PrintLogger binds sys.stdout
    fields["event"] = event
    line: Any = fields
    try:
        for processor in config["processors"]:
            line = processor(logger, "info", line)
    except structlog.DropEvent:
        return
    logger.msg(line)


_PID = os.getpid()


def _child_pid() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_child_pid)  # `--workers N` forks after this module is imported


def _add_pid(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """Which worker process wrote the line (`--workers N`): read once per process, not a call per line."""
    event["pid"] = _PID
    return event


class _SecondStamp:
    """The date and time of day of the last second a line was written in, formatted once per second."""

    second = -1
    text = ""


_STAMP = _SecondStamp()


def _utc_timestamp(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """ISO 8601 in UTC with microseconds (`2026-12-07T09:40:46.123456Z`), structlog's `TimeStamper(fmt="iso",
    utc=True)` but for its dropping a fraction of 0: that one formatted a `datetime` for every line."""
    now = time.time()
    second = int(now)
    if second != _STAMP.second:
        _STAMP.second, _STAMP.text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    event["timestamp"] = f"{_STAMP.text}.{int((now - second) * 1_000_000):06d}Z"
    return event
