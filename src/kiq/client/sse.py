"""Server-Sent Events, parsed as the HTML standard says, a chunk of bytes at a time.

Lines end in CRLF, LF or CR (a CR at the end of one chunk may be the first half of a
CRLF split across two); ``field: value`` lines build an event, a blank line dispatches
it, lines starting with ``:`` are comments (a node's heartbeats). An ``id`` line counts
only once its event is dispatched: a connection lost in the middle of an event must
resume before it, not after.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Event:
    """One dispatched event: ``event`` (its kind, ``message`` when unnamed), ``data`` (its
    data lines joined by newlines) and ``id``, the last event id once it was dispatched."""

    event: str
    data: str
    id: str | None = None


class SseParser:
    """Feed it the bytes of one stream; it returns each event as soon as it is complete."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._started = False
        self._after_cr = False  # the last chunk ended in CR: a LF first in the next is its pair
        self._event = ""
        self._data: list[str] = []
        self._id_buffer: str | None = None
        self.last_id: str | None = None  # the id of the last dispatched event
        self.retry_ms: int | None = None  # the reconnection time the server asked for
        self.comments = 0  # comment lines seen (heartbeats)

    def feed(self, chunk: bytes) -> list[Event]:
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = False
        buffer = self._buffer + text
        events: list[Event] = []
        pos = 0
        for match in _EOL.finditer(buffer):
            event = self._line(buffer[pos : match.start()])
            if event is not None:
                events.append(event)
            pos = match.end()
            if match.group() == "\r" and pos == len(buffer):
                self._after_cr = True
        self._buffer = buffer[pos:]
        return events

    def _line(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        self.last_id = self._id_buffer
        data, kind = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return Event(kind or "message", "\n".join(data), self.last_id)
