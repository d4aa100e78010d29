"""WebSocket mode's response channel (`apis/responses_ws.py`): what the one serve path writes a response's
stream to, sent as one text message per event on the connection's link."""

from __future__ import annotations

from gateway.core.responses.socket import EventCutter
from gateway.http import Link

_TEXT_FRAME = 0x81  # a whole text frame's first byte (`core.websocket.text_frame`); SSE starts with text


class EventChannel:
    """The response's channel: one text message per event out, on the connection's link. The serve path's
    Responses events arrive framed already (`EVENT_ENCODER`, set for the response's task); anything else
    written to it (an SSE keep-alive comment, which a socket does not need) is cut as SSE."""

    raw_body = True
    __slots__ = ("_link", "cutter")

    def __init__(self, link: Link):
        self._link = link
        self.cutter = EventCutter()

    @property
    def closing(self) -> bool:
        return self._link.closing

    @closing.setter
    def closing(self, value: bool) -> None:  # the connection's own state: not set through a response
        pass

    def send(self, data: bytes) -> bool:
        if not data:
            return False
        frames = data if data[0] == _TEXT_FRAME else self.cutter.frames(data)
        return self._link.send(frames) if frames else False

    async def drained(self) -> None:
        await self._link.drained()

    def date(self) -> str:
        return self._link.date()
