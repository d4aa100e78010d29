"""A real PostgreSQL server for tests, as `redis_server.py` runs redis-server: a private data directory
initdb'd under a temp dir, a free port on 127.0.0.1, trust auth for one user; run as the `postgres` user
when the tests run as root (postgres refuses root).

    with PostgresServer() as pg:
        url = pg.url            # postgresql://gateway@127.0.0.1:<port>/postgres
        url = pg.new_database() # the URL of a new, empty database on it
        pg.stop(); pg.start()   # down and back on the same port, the data kept
        pg.pause(); pg.resume() # hung (SIGSTOP) and answering again

    replica = PostgresServer(replica_of=pg)   # a streaming replica (pg_basebackup -R) on its own port
    replica.promote()                         # pg_ctl promote: it becomes a primary
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg

from tests.ports import free_port

START_TIMEOUT_S = 30.0


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    path = found[-1] if found else shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed: run scripts/ensure-tools.sh")
    return path


def _user() -> dict[str, str]:
    """Popen's `user`/`group`: the server itself (not a wrapper) runs as `postgres`, so signals reach it."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


class PostgresServer:
    def __init__(self, replica_of: PostgresServer | None = None) -> None:
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="gateway-pg-"))
        self._data = self._dir / "data"
        self._proc: subprocess.Popen[bytes] | None = None
        if os.geteuid() == 0:
            shutil.chown(self._dir, "postgres", "postgres")
        if replica_of is None:
            subprocess.run([_bin("initdb"), "-D", str(self._data), "-U", "gateway", "--auth=trust", "--no-sync",
                            "-E", "UTF8"], check=True, capture_output=True, cwd=self._dir, **_user())
        else:  # a copy of the running primary that streams its WAL (-R writes standby.signal)
            subprocess.run([_bin("pg_basebackup"), "-h", "127.0.0.1", "-p", str(replica_of.port), "-U", "gateway",
                            "-D", str(self._data), "-R", "-X", "stream", "--no-sync", "-c", "fast"],
                           check=True, capture_output=True, cwd=self._dir, **_user())

    def promote(self) -> None:
        """The replica becomes a primary (pg_ctl promote waits until it accepts writes)."""
        subprocess.run([_bin("pg_ctl"), "promote", "-D", str(self._data), "-w", "-t", "30"],
                       check=True, capture_output=True, cwd=self._dir, **_user())

    @property
    def url(self) -> str:
        return f"postgresql://gateway@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        """The URL of a new, empty database on this server: a test's own store on a shared server."""
        db = f"t{time.monotonic_ns()}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {db}")  # type: ignore[arg-type]  # a name of digits
        return self.url.rsplit("/", 1)[0] + "/" + db

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        args = [_bin("postgres"), "-D", str(self._data), "-p", str(self.port), "-h", "127.0.0.1",
                "-k", str(self._dir), "-c", "fsync=off", "-c", "max_connections=200"]
        with open(self._dir / "pg.log", "ab") as log:
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                          cwd=self._dir, **_user())
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self._log_tail()}")
            try:
                with psycopg.connect(self.url, connect_timeout=1):
                    return
            except psycopg.OperationalError:
                time.sleep(0.02)  # polling a child process for readiness, bounded by the deadline
        raise RuntimeError(f"postgres did not start: {self._log_tail()}")

    def _log_tail(self) -> str:
        log = self._dir / "pg.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"

    def stop(self) -> None:
        """Fast shutdown (SIGINT): clients are disconnected, the data stays for `start`."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        """A hung server: SIGSTOP to it and to every process it started (each backend puts itself in a
        session of its own, so a process group would miss them); connections stay open, nothing answers."""
        for pid in self._processes():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in reversed(self._processes()):
            os.kill(pid, signal.SIGCONT)

    def _processes(self) -> list[int]:
        """The server's pid, then its children's (from /proc)."""
        assert self._proc is not None
        main = self._proc.pid
        children = []
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # a process that ended meanwhile
            if int(fields[1]) == main:  # ppid, the field after the state
                children.append(int(stat.split("/")[2]))
        return [main, *children]

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
