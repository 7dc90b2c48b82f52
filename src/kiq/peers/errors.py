"""Why another node gave no answer."""

from __future__ import annotations

from kiq.errors import KiqError


class PeerError(KiqError):
    """A peer could not answer: unreachable, too slow, refused, or answered garbage.

    Retriable: ask the next replica. ``status`` is the peer's HTTP status when it
    answered (421: it holds no usable replica), 0 when no answer came at all.
    """

    retriable = True

    def __init__(self, target: str, reason: str, status: int = 0) -> None:
        super().__init__(f"{target}: {reason}")
        self.target = target
        self.reason = reason
        self.status = status
