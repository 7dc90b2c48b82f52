"""What ``Client`` and ``AsyncClient`` share: their settings, and each call's arguments
made into its flow (``calls.py``). The two clients only drive the flows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import httpx

from kiq.client import calls, indexes
from kiq.client.calls import params, prefix_plan, segment
from kiq.client.errors import KeyNotFound, NotFound
from kiq.client.indexes import IndexValue
from kiq.client.origins import Credentials
from kiq.client.position import SessionPosition
from kiq.client.results import Item, Lookup, Many, Page, Window
from kiq.client.retry import RetryPolicy
from kiq.client.router import Router
from kiq.client.steps import Flow
from kiq.client.watch import WatchSession

Order = Literal["asc", "desc"]
DEFAULT_TIMEOUT_S = 10.0


class ClientCore:
    def __init__(
        self,
        urls: Sequence[str] | str,
        token: str | None,
        retry: RetryPolicy | None,
        metadata_max_age_s: float,
        track_position: bool = True,
    ) -> None:
        seeds = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else list(urls)
        self.router = Router([u for u in seeds if u], max_age_s=metadata_max_age_s)
        self.retry = retry if retry is not None else RetryPolicy()
        # The token goes only where ``Credentials`` allows (``origins.py``), not on every request.
        self.headers: dict[str, str] = {}
        self.auth = Credentials(token, self.router.trusted) if token else None
        # What this client has seen: every read at or past it (position.py); None: off.
        self.position = SessionPosition() if track_position else None

    @property
    def position_token(self) -> str:
        return self.position.token if self.position is not None else ""

    @position_token.setter
    def position_token(self, token: str) -> None:
        if self.position is None:
            raise ValueError("this client keeps no position (track_position=False)")
        self.position.token = token

    def refresh(self) -> Flow[None]:
        return calls.refresh(self.router)

    def lookup(
        self,
        table: str,
        key: str,
        max_lag: int | None,
        min_offset: int | None,
        wait_ms: int | None,
        first: calls.Attempt | None = None,
    ) -> Flow[Lookup]:
        return calls.lookup(
            self.router,
            self.retry,
            table,
            key,
            max_lag,
            min_offset,
            wait_ms,
            None,
            self.position,
            first,
        )

    def multiget(
        self, table: str, keys: Iterable[str], consistent: calls.Consistent = None
    ) -> Flow[Many]:
        return calls.multiget(self.router, self.retry, table, keys, None, self.position, consistent)

    def range_page(
        self,
        table: str,
        prefix: str | None,
        start: str | None,
        end: str | None,
        order: Order,
        limit: int | None,
        cursor: str | None,
        consistent: calls.Consistent = None,
    ) -> Flow[Page[Item]]:
        query = params(
            prefix=prefix, order=order, limit=limit, cursor=cursor, consistent=consistent
        )
        query.update(params(**{"from": start, "to": end}))
        path = f"/v1/tables/{segment(table)}/range"
        plan = prefix_plan(self.router, table, prefix)
        body = yield from calls.page(
            self.router, self.retry, path, query, plan, None, self.position
        )
        return calls.range_page(body)

    def windows_page(
        self,
        table: str,
        key: str,
        start: str | None,
        end: str | None,
        order: Order,
        limit: int | None,
        cursor: str | None,
        consistent: calls.Consistent = None,
    ) -> Flow[Page[Window]]:
        query = params(order=order, limit=limit, cursor=cursor, consistent=consistent)
        query.update(params(**{"from": start, "to": end}))
        path = f"/v1/tables/{segment(table)}/keys/{segment(key)}/windows"

        def plan() -> list[str]:
            return self.router.key(table, key)[1]

        body = yield from calls.page(
            self.router, self.retry, path, query, plan, None, self.position
        )
        windows = [Window(w["start"], w["end"], w["value"]) for w in body.get("windows", [])]
        return Page(windows, body.get("next_cursor"), body.get("batch"))

    def by_page(
        self,
        table: str,
        field: str,
        value: IndexValue | None,
        low: IndexValue | None,
        high: IndexValue | None,
        order: Order,
        limit: int | None,
        cursor: str | None,
        count: bool,
        consistent: calls.Consistent = None,
    ) -> Flow[Page[Item]]:
        """One page of an index read: to any node, which asks every partition. A 404
        ``not_found`` names a missing index, not a key: ``NotFound``, not ``KeyNotFound``."""
        path, query = indexes.by_request(
            table, field, value, low, high, order, limit, cursor, count, consistent
        )
        try:
            body = yield from calls.page(
                self.router, self.retry, path, query, self.router.anywhere, None, self.position
            )
        except KeyNotFound as exc:
            raise NotFound(exc.message, exc.status, exc.code, exc.details, exc.url) from None
        return indexes.by_page(body)

    def top(
        self,
        table: str,
        n: int,
        prefix: str | None,
        window: str | None,
        consistent: calls.Consistent = None,
        by: str | None = None,
    ) -> Flow[list[Item]]:
        query = params(n=n, prefix=prefix, window=window, consistent=consistent, by=by)
        path = f"/v1/tables/{segment(table)}/top"
        plan = prefix_plan(self.router, table, prefix)
        body = yield from calls.page(
            self.router, self.retry, path, query, plan, None, self.position
        )
        return [Item(i["key"], i["value"]) for i in body.get("items", [])]

    def metadata(self) -> Flow[dict[str, Any]]:
        return calls.metadata(self.router, self.retry)

    def watch(
        self,
        table: str,
        key: str | None,
        keys: Sequence[str] | None,
        prefix: str | None,
        give_up_s: float,
    ) -> WatchSession:
        return WatchSession(self.router, table, key, keys, prefix, give_up_s)


# Kept-alive connections to each node: a busy client reuses them rather than re-dial.
NODE_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=32)


def http_options(
    core: ClientCore,
    timeout_s: float,
    verify: Any,
    transport: Any,
    node_transport: Callable[..., Any],
) -> Mapping[str, Any]:
    """httpx's client settings, the same for both clients (``node_transport``: httpx's
    transport class, blocking or asyncio).

    Each seed node gets a pool of its own: httpcore walks every connection of a pool for
    each request it places (measured: 800 checks a lookup with one pool for 3 nodes under
    32 calls in flight, a third of the caller's CPU), so three small pools cost a third of
    one large one. A node found later in the metadata shares the default pool."""
    options: dict[str, Any] = {
        "headers": core.headers,
        "auth": core.auth,
        "timeout": timeout_s,
        "verify": verify,
        "follow_redirects": False,  # a Location is no origin the token may go to
        "limits": NODE_LIMITS,
    }
    if transport is not None:
        options["transport"] = transport
    else:
        options["mounts"] = {
            f"{url}/": node_transport(verify=verify, limits=NODE_LIMITS)
            for url in core.router.seeds
        }
    return options
