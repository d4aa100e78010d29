"""Input redaction (`redaction.inputs: true`) without stalling the event loop (CONTRACT §5.3).

Masking a prompt costs up to ~3 µs a character on text dense with candidates (bench/REDACTION.md,
"Adversarial text"): a 10 MB prompt is ~30 s of CPU. Done in one call on the loop, it froze every
stream and /healthz of the process for that long. So it is cut into slices, run by one scheduler per
process that takes the waiting prompts in turn, a slice each (round robin), and gives the loop back
after `TURN_S` of work: whatever the number and size of the prompts, the loop's other work waits at
most one turn (~`TURN_S` plus one slice) between two of its own, and a small prompt is not queued
behind a big one. A prompt of at most `INLINE_CHARS` characters is masked at once (a few ms at worst).

The slices go through the redaction window, which gives exactly the one-shot result however its input
is split (`core.redact.window`), so what leaves for the provider is what `Redactor.redact` would give.
A request that goes away (client disconnect) leaves the queue at the scheduler's next turn.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from gateway.core.redact.window import RedactionWindow, Redactor

INLINE_CHARS = 1024  # ~3 ms at the worst rate: not worth a trip through the scheduler
SLICE_CHARS = 512  # one step of one prompt: ~1.5 ms at the worst rate, well under 1 ms on prose
TURN_S = 0.002  # the scheduler's work between two returns to the loop

TextSlot = tuple[dict[str, Any], str]  # (object, key) of one text of a prompt


class _Job:
    """One prompt's texts, masked a slice at a time, in place."""

    __slots__ = ("done", "out", "pos", "redactor", "slot", "slots", "window")

    def __init__(self, redactor: Redactor, slots: list[TextSlot], done: asyncio.Future[None]) -> None:
        self.redactor, self.slots, self.done = redactor, slots, done
        self.slot, self.pos = 0, 0
        self.window: RedactionWindow = redactor.window()
        self.out: list[str] = []

    def step(self) -> bool:
        """Mask the next slice; True once every text is masked (and written back)."""
        obj, key = self.slots[self.slot]
        text: str = obj[key]
        end = min(self.pos + SLICE_CHARS, len(text))
        self.out.append(self.window.push(text[self.pos:end]))
        self.pos = end
        if end < len(text):
            return False
        self.out.append(self.window.flush())
        obj[key] = "".join(self.out)
        self.slot, self.pos, self.out, self.window = self.slot + 1, 0, [], self.redactor.window()
        return self.slot == len(self.slots)


class InputRedaction:
    """The process's scheduler of prompt masking; one per Runtime, carried across reloads."""

    def __init__(self) -> None:
        self._jobs: deque[_Job] = deque()
        self._runner: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return len(self._jobs)

    async def redact(self, redactor: Redactor, slots: list[TextSlot]) -> None:
        """Mask every slot's text in place; returns once all of them are masked."""
        slots = [s for s in slots if s[0][s[1]]]
        if sum(len(obj[key]) for obj, key in slots) <= INLINE_CHARS:
            for obj, key in slots:
                obj[key] = redactor.redact(obj[key]).text
            return
        job = _Job(redactor, slots, asyncio.get_running_loop().create_future())
        self._jobs.append(job)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())
        await job.done

    async def _run(self) -> None:
        jobs = self._jobs
        while jobs:
            deadline = time.perf_counter() + TURN_S
            while jobs and time.perf_counter() < deadline:
                job = jobs.popleft()
                if job.done.done():  # the request went away (its await was cancelled)
                    continue
                try:
                    finished = job.step()
                except Exception as exc:  # pragma: no cover - a bug in the window: fail that request only
                    job.done.set_exception(exc)
                    continue
                if finished:
                    job.done.set_result(None)
                else:
                    jobs.append(job)
            await asyncio.sleep(0)  # one turn of the loop for everything else
