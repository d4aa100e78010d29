"""Writes to Redis a request does not wait for (redis.py): response owners and served names
(docs/scale-out.md). Each runs as a task of its own under a key (a later read of the same key on this
replica may wait for it), at most a given number in flight: over it, a write is dropped and logged, as is
one that fails; each has the backend's deadline, and falls back to local memory like any operation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.state.redis_values import log


class BackgroundWrites:
    """The writes in flight of one kind, by key; `event` is what a dropped or failed one logs."""

    def __init__(self, event: str) -> None:
        self._event = event
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, key: str, write: Callable[[], Coroutine[Any, Any, None]], limit: int) -> asyncio.Task[None] | None:
        """Run `write()` in the background, unless `limit` writes are in flight already; its task, or None."""
        if len(self._tasks) >= limit:
            log().warning(self._event, reason="too many writes in flight", in_flight=len(self._tasks))
            return None
        task = asyncio.get_running_loop().create_task(write())
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._written(key, done))
        return task

    def pending(self, key: str) -> asyncio.Task[None] | None:
        return self._tasks.get(key)

    def _written(self, key: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if not task.cancelled() and task.exception() is not None:
            log().warning(self._event, reason=type(task.exception()).__name__)

    def cancel(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
