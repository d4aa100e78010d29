"""Open WebSocket-mode connections per caller (docs/reference.md, WebSocket mode). Each holds a connection's
state (the conversation kept for `previous_response_id`, up to `server.max_body_bytes`, and a frame parser),
so one caller may hold at most `server.websocket_max_per_key` of them in a process: past it an upgrade is
refused with a 429 before its `101`, where `server.max_connections` alone let one key take every slot.

A caller is a key (a stored key by its id, as its limits count it) or, for an IdP token, its subject:
a team's token holders share a key name, not their sockets. Without a key (`allow_unauthenticated`)
there is no caller to count by: `server.max_connections` bounds those connections."""

from __future__ import annotations

from gateway.config.types import ApiKey
from gateway.errors import TooManySockets


class Slot:
    """A connection's place in its caller's count: given back once, however often `release` is called
    (the connection's end and its loss both call it)."""

    __slots__ = ("_caller", "_slots")

    def __init__(self, slots: SocketSlots | None, caller: str):
        self._slots, self._caller = slots, caller

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots.give_back(self._caller)


class SocketSlots:
    """The open connections of each caller in this process (with `--workers`, each worker counts its own)."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, int] = {}  # callers with at least one connection open: bounded by them

    def take(self, key: ApiKey | None, cap: int) -> Slot:
        """A slot for `key`'s new connection; raises TooManySockets when it holds `cap` already."""
        if key is None:
            return Slot(None, "")
        caller = key.counter if key.subject is None else f"{key.counter}/sub/{key.subject}"  # `/` is in no name
        held = self._open.get(caller, 0)
        if held >= cap:
            raise TooManySockets(f"this key has {held} WebSocket connections open, the most the gateway allows "
                                 "(server.websocket_max_per_key): close one, or use HTTP streaming")
        self._open[caller] = held + 1
        return Slot(self, caller)

    def give_back(self, caller: str) -> None:
        held = self._open.get(caller, 0) - 1
        if held > 0:
            self._open[caller] = held
        else:
            self._open.pop(caller, None)
