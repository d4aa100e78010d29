"""`server.sched_slice_us` in a running gateway: its event loop's thread runs with the slice from the
config, a SIGHUP with the setting taken out gives the kernel's default back, and both changes are logged
once with their outcome."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gateway.scheduling import Outcome, set_thread_slice, thread_slice_ns
from tests.harness import ProcessLog
from tests.ports import free_port

# measures the loop's turns: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

CONFIG = """
server: {{host: 127.0.0.1{slice}}}
auth: {{keys: [{{name: t, key: k}}]}}
providers: {{demo: {{type: mock, ttft_ms: 1, token_delay_ms: 0}}}}
models: [{{name: a, deployments: [{{provider: demo, model: d}}]}}]
"""


def kernel_takes_slices() -> tuple[Outcome, int | None]:
    """What this kernel does with a slice (asked in a thread of the test's own), and its default."""
    out: list[tuple[Outcome, int | None]] = []

    def probe() -> None:
        default = thread_slice_ns()
        out.append((set_thread_slice(400)[0], default))

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return out[0]


def test_the_loop_thread_takes_the_configured_slice_and_a_reload_gives_it_back(tmp_path: Path) -> None:
    outcome, default = kernel_takes_slices()
    expected = {Outcome.APPLIED: 300_000, Outcome.IGNORED: 0}.get(outcome, default)
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG.format(slice=", sched_slice_us: 300"))
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port",
                             str(free_port()), "--metrics-port", str(free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = ProcessLog(proc)
    try:
        first = log.wait("sched_slice")[0]
        assert first["slice_us"] == 300
        assert first["outcome"] == outcome.value
        assert thread_slice_ns(proc.pid) == expected  # the main thread runs the loop
        cfg.write_text(CONFIG.format(slice=""))
        log.wait("listening")  # the slice is set before the signal handlers are: SIGHUP only after this
        proc.send_signal(signal.SIGHUP)
        second = log.wait("sched_slice", 2)[1]
        assert (second["slice_us"], second["outcome"]) == (0, "refused" if outcome is Outcome.REFUSED else "applied")
        assert thread_slice_ns(proc.pid) == default
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
