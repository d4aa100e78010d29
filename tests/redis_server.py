"""A real `redis-server` for tests: a free loopback port, a private temp dir, no persistence.

    with RedisServer() as server:        # started, answering PING
        url = server.url                 # redis://127.0.0.1:<port>/0
        server.kill()                    # crash it (SIGKILL) mid-test
        server.start()                   # again, on the same port, empty
        server.pause(); server.resume()  # SIGSTOP/SIGCONT: a Redis that accepts but never answers

Nothing is left behind: snapshots and the append-only file are off, and the temp dir (holding only the
server's log) is removed by `close()` / on leaving the `with` block.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from tests.ports import free_port

START_TIMEOUT_S = 10.0


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, port: int | None = None, extra_args: tuple[str, ...] = (), cluster_bus: bool = False) -> None:
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self._extra_args = extra_args
        # a cluster node's bus port: taken like `port` at each first-start attempt, then kept for restarts
        self.cluster_port = free_port() if cluster_bus else None
        self._dir = Path(tempfile.mkdtemp(prefix="gateway-redis-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start (or restart after stop/kill) on `self.port`; returns once the server answers PING."""
        if self.running:
            return
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed: run scripts/ensure-tools.sh")
        for _attempt in range(3):
            if self._launch():
                self._fixed_port = True  # a restart must come back on the same port
                return
            if self._fixed_port:
                break
            self.port = free_port()  # lost the race for a port: take others
            if self.cluster_port is not None:
                self.cluster_port = free_port()
        raise RuntimeError(f"redis-server did not start on port {self.port}: {self._log_tail()}")

    def _launch(self) -> bool:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self._dir), "--daemonize", "no"]
        args += ["--logfile", str(self._dir / "redis.log"), "--loglevel", "warning", *self._extra_args]
        if self.cluster_port is not None:
            args += ["--cluster-port", str(self.cluster_port)]
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False  # exited: most likely the port was taken
            if _answers_ping(self.port):
                self._proc = proc
                return True
            time.sleep(0.005)  # polling a child process for readiness, bounded by the deadline
        proc.kill()
        proc.wait()
        return False

    def _log_tail(self) -> str:
        log = self._dir / "redis.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM); with persistence off it writes nothing."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """Crash it (SIGKILL): clients see refused connections from now on."""
        self._end(signal.SIGKILL)

    def _end(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)  # a paused server must be able to act on SIGTERM
        proc.send_signal(sig)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        """SIGSTOP: the kernel still accepts connections, but nothing answers (a stalled Redis)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
