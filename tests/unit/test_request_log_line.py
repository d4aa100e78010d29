"""The per-request line (gateway/observe/logs.py, `write_info`): what `log.info` would write through the
configured chain, for a fraction of its cost; a test's `capture_logs` still sees it."""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from gateway.observe import logs

FIELDS: dict[str, Any] = {"request_id": "r1", "api": "chat", "status": 200, "ttft_ms": 1.5, "reason": None,
                          "guardrails": {"pii": "pass"}, "stream": True}


class Lines:
    def __init__(self, sink: io.BytesIO):
        self._sink = sink

    def take(self) -> list[dict[str, Any]]:
        """The lines written since the last take, parsed."""
        lines = [orjson.loads(line) for line in self._sink.getvalue().splitlines()]
        self._sink.seek(0)
        self._sink.truncate()
        return lines


@pytest.fixture
def json_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[Lines]:
    """The gateway's JSON configuration on a stdout of our own; the test session's configuration after."""
    sink = io.BytesIO()
    wrapper = io.TextIOWrapper(sink)  # held: pytest replaces sys.stdout, and a dropped wrapper closes `sink`
    monkeypatch.setattr(sys, "stdout", wrapper)
    saved = structlog.get_config()
    logs.configure_logging("info", "json")
    try:
        yield Lines(sink)
    finally:
        wrapper.detach()
        structlog.configure(**saved)


def test_the_line_is_what_log_info_writes_key_for_key(json_lines: Lines) -> None:
    structlog.get_logger("gateway").info("request", **FIELDS)
    logs.write_info("request", dict(FIELDS))
    by_structlog, ours = json_lines.take()
    assert list(ours) == list(by_structlog)  # the same keys, in the same order
    assert ours.pop("timestamp") != "" and by_structlog.pop("timestamp") != ""
    assert ours == by_structlog == {**FIELDS, "event": "request", "level": "info", "pid": os.getpid()}


def test_a_bound_request_id_is_merged_as_the_chain_merges_it(json_lines: Lines) -> None:
    structlog.contextvars.bind_contextvars(session="s1")
    try:
        logs.write_info("request", {"status": 200})
    finally:
        structlog.contextvars.unbind_contextvars("session")
    [line] = json_lines.take()
    assert (line["session"], line["status"], line["event"]) == ("s1", 200, "request")


def test_capture_logs_sees_the_line() -> None:
    with capture_logs() as captured:
        logs.write_info("request", dict(FIELDS))
    assert captured == [{**FIELDS, "event": "request", "log_level": "info"}]


def test_the_timestamp_is_iso_utc_with_microseconds_and_now(json_lines: Lines) -> None:
    stamps = []
    for _ in range(3):  # the second's text is formatted once, then reused
        before = time.time()
        logs.write_info("request", {})
        after = time.time()
        stamp = json_lines.take()[0]["timestamp"]
        assert stamp.endswith("Z") and len(stamp) == len("2026-12-07T09:40:46.123456Z")
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        assert before - 1e-6 <= at <= after + 1e-6
        stamps.append(stamp)
    assert stamps == sorted(stamps)


def _pid_in_child(out: Any) -> None:
    out.send((logs._PID, os.getpid()))


def test_a_forked_worker_writes_its_own_pid() -> None:
    ends = multiprocessing.get_context("fork").Pipe()
    child = multiprocessing.get_context("fork").Process(target=_pid_in_child, args=(ends[1],))
    child.start()
    written, actual = ends[0].recv()
    child.join()
    assert written == actual != os.getpid()


def test_nothing_is_written_below_level_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO()))
    saved = structlog.get_config()
    try:
        logs.configure_logging("warning", "json")
        with capture_logs() as captured:
            logs.write_info("request", {"status": 200})
        assert captured == [] and not logs.info_enabled()
    finally:
        logs.configure_logging("info", "json")  # the module's level, as the other tests expect it
        structlog.configure(**saved)
