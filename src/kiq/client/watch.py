"""One watch's life across connections: where to connect, what each event means, when and
where to reconnect.

A node streams a key's (or keys', or a prefix's) snapshot then its changes as
Server-Sent Events (``sse.py``). The stream may end: the node stops, the client
falls behind and the node drops it (a ``dropped`` event), the network fails. The
session then connects again, to the partition's next replica when the last one
failed, with ``Last-Event-ID`` set to the last event's id, and the node resumes
after it: no gap, no duplicate. It gives up (``Unavailable``) only after
``give_up_s`` without any event. Shared by ``Client.watch`` and ``AsyncClient.watch``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, get_args

import orjson

from kiq.client.calls import segment
from kiq.client.errors import ClientError, Unavailable, error_for
from kiq.client.results import Change, ChangeKind
from kiq.client.retry import RetryPolicy
from kiq.client.router import Router
from kiq.client.sse import Event
from kiq.client.steps import Send

log = logging.getLogger(__name__)
EVENT_STREAM = "text/event-stream"
KINDS: frozenset[str] = frozenset(get_args(ChangeKind))
DROPPED = "dropped"
# Heartbeats come every 15 s: a stream silent for longer than this is dead.
READ_TIMEOUT_S = 45.0
_WATCH_BACKOFF = RetryPolicy(attempts=1, backoff_s=0.1, max_backoff_s=2.0)


class Dropped(Exception):
    """The node ended the stream on purpose (a slow subscriber): connect again."""


class WatchSession:
    def __init__(
        self,
        router: Router,
        table: str,
        key: str | None = None,
        keys: Sequence[str] | None = None,
        prefix: str | None = None,
        give_up_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        given = [x for x in (key, keys, prefix) if x is not None]
        if len(given) != 1 or (keys is not None and not keys):
            raise ValueError("watch takes one of key=, keys= (not empty) or prefix=")
        self.router = router
        self.table = table
        self._key, self._keys, self._prefix = key, list(keys or ()), prefix
        base = f"/v1/tables/{segment(table)}"
        if key is not None:
            self.path, self.params = f"{base}/keys/{segment(key)}/watch", None
        elif keys is not None:
            self.path, self.params = f"{base}/watch", {"keys": ",".join(keys)}
        else:
            self.path, self.params = f"{base}/watch", {"prefix": prefix or ""}
        self.last_id: str | None = None
        self.retry_ms: int | None = None
        self._give_up_s = give_up_s
        self._clock = clock
        self._failures = 0
        self._failing_since: float | None = None
        self._failed: list[str] = []  # nodes that failed us since the last event, in order
        self.node_url = ""  # the node of the latest connection

    # -- connecting ---------------------------------------------------------------------

    def plan(self) -> list[str]:
        """The replicas of the one partition watched, best first; else any node."""
        info = self.router.table(self.table)
        partitions: set[int] = set()
        if info is not None:
            if self._key is not None:
                partitions = {info.partition_of(self._key)}
            elif self._keys:
                partitions = {info.partition_of(k) for k in self._keys}
            elif (p := info.prefix_partition(self._prefix)) is not None:
                partitions = {p}
        if len(partitions) == 1:
            return self.router.holders(self.table, partitions.pop())
        return self.router.anywhere()

    def request(self, headers: dict[str, str] | None = None) -> Send:
        """The next connection: the best replica that has not just failed us."""
        targets = self.plan()
        if not targets:
            raise Unavailable("no node of the cluster is known")
        fresh = [u for u in targets if u not in self._failed]
        url = fresh[0] if fresh else targets[self._failures % len(targets)]
        self.node_url = url
        sent = {"accept": EVENT_STREAM, "cache-control": "no-cache", **(headers or {})}
        if self.last_id is not None:
            sent["last-event-id"] = self.last_id
        return Send("GET", url + self.path, self.params, headers=sent)

    def opened(self, url: str, status: int, content_type: str, body: Callable[[], bytes]) -> bool:
        """Whether the answer is a stream to read; False: connect again (after ``lost``).
        Raises what an answer no reconnection mends means (400, 401, 403, 404)."""
        if status == 200 and content_type.startswith(EVENT_STREAM):
            return True
        if status == 200:
            raise ClientError(f"{url} answered {content_type!r}, not an event stream", 200)
        error = error_for(status, body(), url)
        if not error.retriable:
            raise error
        self.router.mark_stale()
        return False

    # -- reading ------------------------------------------------------------------------

    def take(self, event: Event) -> Change | None:
        """What ``event`` means to the caller: a change, or None (a kind this client does
        not know). Raises ``Dropped`` when the node dropped this subscriber."""
        self._failures, self._failing_since, self._failed = 0, None, []
        if event.id is not None:
            self.last_id = event.id
        if event.event == DROPPED:
            raise Dropped(_reason(event.data))
        if event.event not in KINDS:
            return None
        data: dict[str, Any] = orjson.loads(event.data)
        offset = data.get("offset")
        return Change(
            kind=event.event,  # type: ignore[arg-type]  # one of KINDS, checked above
            table=str(data.get("table", self.table)),
            key=str(data.get("key", "")),
            value=data.get("value"),
            partition=int(data.get("partition", -1)),
            offset=int(offset) if offset is not None else None,
            served_by=str(data.get("served_by") or ""),
            stale=bool(data.get("stale", False)),
            lag=int(data.get("lag") or 0),
            snapshot=bool(data.get("snapshot", False)),
            id=event.id,
        )

    def lost(self, why: object, dropped: bool = False) -> float:
        """The latest connection ended: seconds to wait before the next one. Raises
        ``Unavailable`` once ``give_up_s`` passed without an event."""
        url, now = self.node_url, self._clock()
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= self._give_up_s:
            raise Unavailable(
                f"watch of {self.table}: no node streamed for {self._give_up_s:.0f} s ({why})",
                url=url,
            )
        log.info("watch of %s: connection to %s ended (%s); reconnecting", self.table, url, why)
        if dropped:
            self._failures += 1
            return 0.0 if self._failures == 1 else _WATCH_BACKOFF.delay(self._failures)
        self.router.mark_stale()
        self._failed.append(url)
        self._failures += 1
        delay = _WATCH_BACKOFF.delay(self._failures - 1)
        return max(delay, (self.retry_ms or 0) / 1000)


def _reason(data: str) -> str:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    return str(parsed.get("reason", data)) if isinstance(parsed, dict) else data
