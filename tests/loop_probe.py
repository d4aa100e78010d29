"""Probes of the event loop's liveness while one request does heavy work (CONTRACT §5.3, issue #27).

A paced chat stream and a /healthz poller run beside the heavy request; each notes, with every chunk or
answer, the CPU time of the loop's own thread (`LoopThread.cpu_time`). `Probes.report` bounds the loop's
CPU time in the worst stream gap and the worst /healthz wait inside the heavy work's window: a stall is
the loop running something else that long. Wall-clock gaps also hold the time the OS gave other processes
(hundreds of ms on a shared test machine whatever the gateway does); they are printed, not bounded.
"""

from __future__ import annotations

import gc
import http.client
import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import openai

from tests.chat_scripts import chunk
from tests.fake_upstream import Pause, Script, sse

PACE_S = 0.01
BOUND_S = 0.1
# The probes are threads of the test's process: a probe waiting for the GIL while the loop's thread
# computes (the sliced work, legitimately) would count that wait as the loop's. The loop's thread keeps
# the GIL up to the switch interval each time it takes it; with 4 threads asking (loop, stream, poller,
# the heavy request's client), the default 5 ms adds tens of ms to a gap that the gateway, alone in its
# process, never sees. 1 ms keeps the probes' own wait small.
SWITCH_S = 0.001
# The gateway's server freezes its start-up heap (`gateway/server.py`: `gc.collect`, `gc.freeze`), so a
# full collection never walks it. The in-process gateway of these tests shares the pytest process's heap,
# which late in a run holds ~450k objects: a full collection that an allocation on the loop's thread
# happens to trigger walks them all, 0.3-0.5 s of the loop's CPU (seen in CI, and logged with
# `gc.callbacks` in the thread named "servers"), a pause the gateway alone never has. So the probes
# freeze the heap as the server does at its start, for the measured window only.


def paced_stream(words: int) -> Script:
    parts: list[Any] = [sse(chunk({"role": "assistant", "content": ""}))]
    for i in range(words):  # pacing of the scenario (a model writing), not synchronisation
        parts += [sse(chunk({"content": f"w{i} "})), Pause(PACE_S)]
    return Script([*parts, b"data: [DONE]\n\n"])


class Stream(threading.Thread):
    """Reads the paced stream, noting when each chunk arrived (wall clock, loop CPU), until told to stop."""

    def __init__(self, client: openai.OpenAI, loop_cpu: Callable[[], float], model: str = "m") -> None:
        super().__init__(daemon=True)
        self.client, self.loop_cpu, self.model = client, loop_cpu, model
        self.arrivals = list[tuple[float, float]]()
        self.flowing, self.stop = threading.Event(), threading.Event()

    def run(self) -> None:
        with self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "go"}],
                                                 stream=True) as stream:
            for ch in stream:
                if ch.choices and ch.choices[0].delta.content:
                    self.arrivals.append((time.monotonic(), self.loop_cpu()))
                    self.flowing.set()
                if self.stop.is_set():
                    return


class Health(threading.Thread):
    """Asks /healthz again and again (one keep-alive connection) until told to stop, noting when each
    was sent, and its wait in wall-clock time and in loop CPU."""

    def __init__(self, port: int, loop_cpu: Callable[[], float]) -> None:
        super().__init__(daemon=True)
        self.port, self.loop_cpu = port, loop_cpu
        self.waits, self.stop = list[tuple[float, float, float]](), threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self.stop.is_set():
            t0, c0 = time.monotonic(), self.loop_cpu()
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
            self.waits.append((t0, time.monotonic() - t0, self.loop_cpu() - c0))
        conn.close()


class Probes:
    """The stream and the poller, started before the heavy request and stopped after it."""

    def __init__(self, client: openai.OpenAI, port: int, loop_cpu: Callable[[], float]) -> None:
        self.stream, self.health = Stream(client, loop_cpu), Health(port, loop_cpu)

    def start(self) -> float:
        """Start both; returns once the stream flows (a gate, not a sleep): the window's start."""
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_S)
        gc.collect()
        gc.freeze()
        self.stream.start()
        assert self.stream.flowing.wait(20), "the concurrent stream is flowing before the heavy request is sent"
        self.health.start()
        return time.monotonic()

    def stop(self) -> None:
        self.stream.stop.set()
        self.health.stop.set()
        self.stream.join(20)
        self.health.join(20)
        sys.setswitchinterval(self._switch)
        gc.unfreeze()

    def report(self, what: str, t0: float, t1: float) -> tuple[float, float]:
        """Worst loop CPU (stream gap, /healthz wait) overlapping [t0, t1]; asserts both kept being served.
        Overlapping, not inside: a stall that ends the window ends a gap or a wait just after it."""
        arrivals = self.stream.arrivals
        gaps = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(arrivals) if b[0] >= t0 and a[0] <= t1]
        checks = [(w, c) for s, w, c in self.health.waits if s <= t1 and s + w >= t0]
        enough = min(10, 1 + int((t1 - t0) / (20 * PACE_S)))  # a short work sees a few gaps only
        assert len(gaps) >= enough, f"{what}: the stream kept flowing during the heavy work"
        assert len(checks) >= enough, f"{what}: /healthz kept answering during the heavy work"
        gap, check = max(g[1] for g in gaps), max(c[1] for c in checks)
        print(f"{what}: {t1 - t0:.2f} s; stream gaps, wall / loop: {max(g[0] for g in gaps) * 1000:.0f} / "
              f"{gap * 1000:.0f} ms max over {len(gaps)}; /healthz, wall / loop: "
              f"{max(c[0] for c in checks) * 1000:.0f} / {check * 1000:.0f} ms max over {len(checks)}")
        return gap, check
