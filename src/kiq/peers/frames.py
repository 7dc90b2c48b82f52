"""The client side of RFC 6455 WebSocket framing, as much as a lookup channel needs.

A peer channel (``channel.py``) is a WebSocket because the node's HTTP server (granian)
already speaks it on the node's own port, with its TLS: no second port to open, and
one upgrade per connection instead of an HTTP request per batch. Only binary messages
are sent; the server's text, ping, pong and close frames are understood. Frames the
client sends are masked, as the RFC asks of every client.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import Final

BINARY: Final = 0x2
CONTINUATION: Final = 0x0
TEXT: Final = 0x1
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA
# Close codes (RFC 6455, 7.4.1), for both ends of a channel.
GOING_AWAY: Final = 1001  # the server is stopping
UNSUPPORTED_DATA: Final = 1003
POLICY_VIOLATION: Final = 1008
SERVICE_RESTART: Final = 1012
TRY_AGAIN_LATER: Final = 1013
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_LENGTH16 = struct.Struct("!H")
_LENGTH64 = struct.Struct("!Q")


class FrameError(Exception):
    """The server sent something that is not a WebSocket frame this client takes."""


def new_key() -> str:
    """A ``Sec-WebSocket-Key``: 16 random bytes, base64."""
    return base64.b64encode(os.urandom(16)).decode()


def accept_for(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer ``key`` with."""
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def client_frame(payload: bytes, opcode: int = BINARY) -> bytes:
    """One final, masked frame holding ``payload``."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 0x80 | 126)) + _LENGTH16.pack(n)
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + _LENGTH64.pack(n)
    mask = os.urandom(4)
    if not n:
        return head + mask
    # XOR as one big integer: a few µs for a batch, not a Python loop per byte
    repeated = (mask * (n // 4 + 1))[:n]
    masked = int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")
    return head + mask + masked.to_bytes(n, "little")


class FrameReader:
    """Cuts the server's byte stream into messages; ``max_size`` bounds one message."""

    __slots__ = ("_buffer", "_fragments", "_max_size", "_opcode")

    def __init__(self, max_size: int) -> None:
        self._buffer = b""
        self._fragments: list[bytes] = []
        self._opcode = 0
        self._max_size = max_size

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """(opcode, payload) of each whole message ``data`` completes; control frames
        (ping, pong, close) come as they arrive, between a message's fragments too."""
        buffer = self._buffer + data if self._buffer else data
        out: list[tuple[int, bytes]] = []
        pos, size = 0, len(buffer)
        while size - pos >= 2:
            first, second = buffer[pos], buffer[pos + 1]
            if second & 0x80:
                raise FrameError("a server frame must not be masked")
            n, start = second & 0x7F, pos + 2
            if n == 126:
                if size - start < 2:
                    break
                n, start = _LENGTH16.unpack_from(buffer, start)[0], start + 2
            elif n == 127:
                if size - start < 8:
                    break
                n, start = _LENGTH64.unpack_from(buffer, start)[0], start + 8
            if n > self._max_size:
                raise FrameError(f"a frame of {n} bytes: more than {self._max_size}")
            if size - start < n:
                break
            payload, pos = buffer[start : start + n], start + n
            self._take(first, payload, out)
        self._buffer = buffer[pos:] if pos < size else b""
        return out

    def _take(self, first: int, payload: bytes, out: list[tuple[int, bytes]]) -> None:
        opcode, final = first & 0x0F, bool(first & 0x80)
        if opcode >= CLOSE:  # control frames are never fragmented
            out.append((opcode, payload))
            return
        if opcode == CONTINUATION:
            if not self._fragments:
                raise FrameError("a continuation frame with no message begun")
        elif self._fragments:
            raise FrameError("a new message before the last one ended")
        else:
            self._opcode = opcode
        self._fragments.append(payload)
        if sum(len(f) for f in self._fragments) > self._max_size:
            raise FrameError(f"a message larger than {self._max_size} bytes")
        if final:
            parts, self._fragments = self._fragments, []
            out.append((self._opcode, parts[0] if len(parts) == 1 else b"".join(parts)))
