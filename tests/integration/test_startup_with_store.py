"""Start-up failures with a store configured (issue #56): the store's connections and threads are closed,
so a port in use is one line on stderr and exit 1, promptly, on SQLite and PostgreSQL alike; with
`--workers` a supervisor whose workers all fail to start exits 1 too, saying so in one line of its own,
instead of waiting for ever."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.control_plane import raw_config
from tests.ports import free_port

EXIT_WITHIN_S = 60  # a hang fails here; a prompt exit is well under a second of the gateway's own work


def _serve_on_a_taken_port(tmp_path: Path, store_url: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], int]:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(yaml.safe_dump(raw_config(store_url)))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port", str(port),
                                 "--metrics-port", str(free_port()), *extra], capture_output=True, text=True,
                                timeout=EXIT_WITHIN_S, env={**os.environ})
        print(f"exited after {time.monotonic() - t0:.2f} s")
    return result, port


def test_a_port_in_use_with_a_store_is_one_line_and_exit_1(tmp_path: Path, store_url: str) -> None:
    result, port = _serve_on_a_taken_port(tmp_path, store_url)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"gateway: cannot listen on 127.0.0.1:{port} (server.port): address already in use"]
    assert "Traceback" not in result.stdout + result.stderr


def test_workers_that_all_fail_to_start_end_the_supervisor_with_exit_1(tmp_path: Path, store_url: str) -> None:
    result, port = _serve_on_a_taken_port(tmp_path, store_url, "--workers", "2")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    taken = f"gateway: cannot listen on 127.0.0.1:{port} (server.port): address already in use"
    assert lines == [taken, taken, "gateway: every worker exited (their own lines above say why)"]
    assert "Traceback" not in result.stdout + result.stderr


def test_a_new_sqlite_file_another_process_holds_locked_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """Another process (a second worker opening the same new file) holds a lock: switching the new file
    to WAL is answered BUSY at once. The start tries again for `connect_timeout_s`, then fails with one
    line; its connection's thread (not a daemon) is closed, or the process would never exit."""
    db = tmp_path / "gateway.db"
    other = sqlite3.connect(db, isolation_level=None)
    try:
        other.execute("CREATE TABLE held (i INTEGER)")
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO held VALUES (1)")
        cfg = tmp_path / "gw.yaml"
        cfg.write_text(yaml.safe_dump(raw_config(f"sqlite:///{db}", connect_timeout_s=0.5)))
        result = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port",
                                 str(free_port()), "--metrics-port", str(free_port())], capture_output=True,
                                text=True, timeout=EXIT_WITHIN_S, env={**os.environ})
    finally:
        other.close()
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gateway: store.url: cannot open the store: ") and "OperationalError" in line
    assert "Traceback" not in result.stdout + result.stderr
