"""The per-request trace recorder's interface: one method per lifecycle point of a request, called by
the pipeline. This base class is the recorder when tracing is off (`NO_TRACE`, shared by every request):
each call is a method that returns at once, and an attempt runs as it would without it. The OpenTelemetry
recorder (`observe.tracing`) overrides every method; nothing here imports the SDK.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from gateway.config.types import Deployment
from gateway.core.events import Usage

if TYPE_CHECKING:
    from gateway.observe.context import RequestContext

T = TypeVar("T")


class RequestTrace:
    __slots__ = ()

    def attempt(self, d: Deployment, run: Callable[[Deployment], Awaitable[T]]) -> Awaitable[T]:
        """One upstream attempt on `d`: `run(d)`, inside its own span when traced."""
        return run(d)

    def dropped(self, d: Deployment, outcome: str) -> None:
        """An attempt on `d` that returned was dropped by the loop (an empty answer, a hedge's loser that
        reached its first token with the winner): it answers nothing, and its span ends with `outcome`."""

    def committed(self, t_first: float) -> None:
        """A stream committed to its winner (headers out); `t_first` (perf_counter) is when its first
        output token arrived."""

    def stream_ended(self) -> None:
        """A committed stream's end: its terminator or its error event is next."""

    def continuing(self, mode: str) -> None:
        """The committed stream's upstream failed, and the next attempt continues it (docs/continuation.md)."""

    def finish(self, ctx: RequestContext | None, status: int, outcome: str, answer: Usage | None = None) -> None:
        """The request is over (its log line is next). `answer`: the usage the answering attempt's upstream
        reported (the winner's span carries it; the request's charge, `ctx.usage`, may hold other attempts')."""


NO_TRACE = RequestTrace()
