"""Work proportional to a client's or an upstream's text, without stalling the event loop (docs/extensions.md,
"Costs a client or an upstream can impose").

Masking costs up to ~3 µs a character on text dense with candidates (bench/REDACTION.md, "Adversarial
text"), a `regex` guardrail's check up to ~1 µs: a 10 MB prompt or a 32 MiB upstream body is tens of
seconds of CPU. Done in one call on the loop, it froze every stream and /healthz of the process for that
long. So it is cut into slices (`core.redact.sliced.MaskSteps`, `core.policy.guard.GuardSteps`), run by
one scheduler per process that takes the waiting works in turn, a slice each (round robin), and gives
the loop back after `TURN_S` of work: whatever the number and size of the works, the loop's other work
waits at most one turn (~`TURN_S` plus one slice) between two of its own, and a small work is not
queued behind a big one. A work of at most `INLINE_CHARS` characters is done at once (a few ms at worst).

Served here: input redaction (`redaction.inputs: true`), the one-shot masking of whole answers
(non-stream bodies of every API, the Message cached after a stream), and the whole-text verdicts of
`terms` and `regex` guardrails (input stage, hold and audit modes, non-stream answers), and the depth
check and the split parse of a big request body (`core.json_body.DepthCheck`, `core.json_split`,
through `run`). Each gives exactly its
one-shot result: the windows decide on the text alone, never on how it was split. A request that goes
away (client disconnect) leaves the queue at the scheduler's next turn.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from gateway.core.json_body import JsonText, LiteralSteps
from gateway.core.redact.sliced import MaskSteps, Steps

if TYPE_CHECKING:
    from gateway.core.policy.guard import TextGuard, Verdict
    from gateway.core.redact.window import Redactor

INLINE_CHARS = 1024  # ~3 ms at the worst rate: not worth a trip through the scheduler
SLICE_CHARS = 512  # one step of one work: ~1.5 ms at the worst rate, well under 1 ms on prose
LITERAL_SLICE_CHARS = 256 * 1024  # a masked text's JSON literal, per step: ~1 ms of non-ASCII text
TURN_S = 0.002  # the scheduler's work between two returns to the loop

TextSlot = tuple[dict[str, Any], str]  # (object, key) of one text of a prompt or a body


class Slicer:
    """The process's scheduler of sliced work; one per Runtime, carried across reloads."""

    def __init__(self) -> None:
        self._jobs: deque[tuple[Steps, asyncio.Future[None]]] = deque()
        self._runner: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return len(self._jobs)

    async def redact(self, redactor: Redactor, slots: list[TextSlot]) -> dict[str, int]:
        """Mask every slot's text in place, as one-shot redaction would; the masks made, per rule."""
        slots = [s for s in slots if s[0][s[1]]]
        texts: list[str] = [obj[key] for obj, key in slots]
        if sum(map(len, texts)) <= INLINE_CHARS:
            counts: dict[str, int] = {}
            for obj, key in slots:
                result = redactor.redact(obj[key])
                obj[key] = result.text
                for rule, n in result.counts.items():
                    counts[rule] = counts.get(rule, 0) + n
            return counts
        steps = MaskSteps(redactor, texts, SLICE_CHARS)
        await self.run(steps)
        for (obj, key), text in zip(slots, steps.texts, strict=True):
            if text != obj[key]:  # a text left whole keeps its object: a long one its JSON literal (json_body.JsonText)
                obj[key] = text if len(text) <= LITERAL_SLICE_CHARS else await self._literal(text)
        return steps.counts

    async def _literal(self, text: str) -> JsonText:
        """A long masked text with its JSON literal written in steps, not escaped whole by the translator."""
        steps = LiteralSteps(text, LITERAL_SLICE_CHARS)
        await self.run(steps)
        assert steps.result is not None
        return steps.result

    async def check(self, guard: TextGuard, text: str) -> Verdict:
        """`guard.check(text)`, a slice at a time when the text is long."""
        if len(text) <= INLINE_CHARS:
            return guard.check(text)
        steps = guard.steps(text, SLICE_CHARS)
        await self.run(steps)
        assert steps.verdict is not None
        return steps.verdict

    async def run(self, steps: Steps) -> None:
        """Run `steps` to its end, a step per turn of the scheduler among the other waiting works."""
        done = asyncio.get_running_loop().create_future()
        self._jobs.append((steps, done))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())
        await done

    async def _run(self) -> None:
        jobs = self._jobs
        while jobs:
            deadline = time.perf_counter() + TURN_S
            while jobs and time.perf_counter() < deadline:
                steps, done = jobs.popleft()
                if done.done():  # the request went away (its await was cancelled)
                    continue
                try:
                    finished = steps.step()
                except Exception as exc:  # a body refused (`json_split`), or a bug in a window: that request's
                    done.set_exception(exc)
                    continue
                if finished:
                    done.set_result(None)
                else:
                    jobs.append((steps, done))
            await asyncio.sleep(0)  # one turn of the loop for everything else
