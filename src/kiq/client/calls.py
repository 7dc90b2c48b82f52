"""The client's calls as flows (``steps.py``): the request each makes, where it goes, how
it is retried and what its answer becomes.

``read`` is the one retry loop: the plan's first replica, then the next, with backoff
(``RetryPolicy``), the metadata refreshed whenever the router asks for it; an answer
served by another node than the one asked marks the metadata stale (the node forwarded:
the partition moved). With a ``SessionPosition`` (``position.py``), every attempt asks
at or past it (``X-Kiq-After``) and every answer's position is merged into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal
from urllib.parse import quote

import httpx
import orjson

from kiq.client.errors import ClientError, Unavailable, error_for
from kiq.client.position import SessionPosition
from kiq.client.results import Item, Lookup, Many, Page
from kiq.client.retry import RetryPolicy
from kiq.client.router import Router
from kiq.client.steps import REFRESH, Fanout, Flow, Send, Sleep, call
from kiq.client.topology import Topology

METADATA, TABLES = "/v1/metadata", "/v1/tables"
SERVED_BY = "x-kiq-served-by"
POSITION = "x-kiq-position"
MULTIGET_CHUNK = 1000  # keys per multiget request (a node takes 10,000 by default)
Consistent = Literal["batch"] | None  # what a read across partitions reflects
Plan = Callable[[], list[str]]
# A first attempt already made outside the flow (``direct.py``): the URL asked and what
# came of it, taken by ``read`` as its attempt 0.
Attempt = tuple[str, httpx.Response | httpx.TransportError]


def segment(text: str) -> str:
    """``text`` as one URL path segment (a key may hold ``/``, ``?``, ``%``). ``.`` and
    ``..`` are escaped too: an HTTP client would read them as the path's own dot segments
    and drop them (a key ``..`` would ask for the table, not the key)."""
    quoted = quote(text, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def refresh(router: Router, headers: Mapping[str, str] | None = None) -> Flow[None]:
    """The metadata and tables of the first node that gives both, into ``router``."""
    router.asking()
    for url in router.sources():
        try:
            meta = yield from call(Send("GET", url + METADATA, headers=headers))
            if meta.status_code in (401, 403):
                router.failed(refused=True)
                return
            if meta.status_code != 200:
                continue
            tables = yield from call(Send("GET", url + TABLES, headers=headers))
        except httpx.TransportError:
            continue
        if tables.status_code == 200:
            router.update(Topology.of(orjson.loads(meta.content), orjson.loads(tables.content)))
            return
    router.failed(refused=False)


def read(
    router: Router,
    policy: RetryPolicy,
    plan: Plan,
    request: Callable[[str], Send],
    position: SessionPosition | None = None,
    first: Attempt | None = None,
) -> Flow[httpx.Response]:
    """The answer of the first replica in ``plan`` that gives one worth keeping: a success,
    an error no retry mends, or the last error once ``policy``'s attempts are spent.
    ``Unavailable`` when the last attempt had no answer at all. ``first``: attempt 0,
    made already to the URL this loop would have asked (``direct.py``)."""
    tried: list[str] = []
    for attempt in range(policy.attempts):
        if attempt == 0 and first is not None:
            url, outcome = first
        else:
            if router.due():
                yield REFRESH
            targets = plan()
            if not targets:
                raise Unavailable("no node of the cluster is known")
            url = next((u for u in targets if u not in tried), targets[attempt % len(targets)])
            send = request(url)
            if position is not None:
                asking = position.asking(send.headers)
                if asking is not send.headers:
                    send = replace(send, headers=asking)
            try:
                outcome = yield from call(send)
            except httpx.TransportError as failed:
                outcome = failed
        tried.append(url)
        last = attempt + 1 == policy.attempts
        if isinstance(outcome, httpx.TransportError):
            router.mark_stale()
            if last:
                raise Unavailable(f"no answer from {url}: {outcome!r}", url=url) from outcome
            yield Sleep(policy.delay(attempt))
            continue
        response = outcome
        status = response.status_code
        if position is not None:
            position.seen(headers_of(response))
        if status < 400 or last or not _retriable(response):
            served_by = headers_of(response).get(SERVED_BY)
            asked = router.node_at(url)
            if served_by is not None and asked is not None and served_by != asked:
                router.mark_stale()  # the node forwarded: the partition has moved
            return response
        if status in (421, 502, 503, 504):
            router.mark_stale()
        yield Sleep(policy.delay(attempt, error_for(status, response.content)))
    raise AssertionError("unreachable: the last attempt returns or raises")


def headers_of(response: httpx.Response) -> dict[str, str]:
    """The response's headers by lowercase name, read once (httpx looks each up by a
    scan of them all, a cost on the hot path)."""
    cached: dict[str, str] | None = response.extensions.get("kiq.headers")
    if cached is None:
        cached = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers.raw}
        response.extensions["kiq.headers"] = cached
    return cached


def _retriable(response: httpx.Response) -> bool:
    status = response.status_code
    if status == 503:
        # min_offset not applied within wait_ms: asking again would wait again
        return b'"applied_offset"' not in response.content
    return status in (421, 429, 502, 504)


def ok(response: httpx.Response, url: str | None = None) -> httpx.Response:
    """``response`` when it is a success; else the error it means. A redirect is one: the
    client follows none, as its token goes only to origins it trusts (``origins.py``)."""
    status = response.status_code
    if 300 <= status < 400:
        where = headers_of(response).get("location", "")
        raise ClientError(
            f"{url or response.url} answered {status} to {where!r}: kiq.client follows no "
            "redirect (it sends its token only to the nodes it was given and those they name)",
            status,
            url=url or str(response.url),
        )
    if status >= 400:
        raise error_for(status, response.content, url or str(response.url))
    return response


def value_of(response: httpx.Response) -> Any:
    """A lookup's value: parsed JSON, or the bytes of a raw table."""
    if headers_of(response).get("content-type", "").startswith("application/octet-stream"):
        return response.content
    return orjson.loads(response.content)


# -- the calls -----------------------------------------------------------------------------


def lookup(
    router: Router,
    policy: RetryPolicy,
    table: str,
    key: str,
    max_lag: int | None = None,
    min_offset: int | None = None,
    wait_ms: int | None = None,
    headers: Mapping[str, str] | None = None,
    position: SessionPosition | None = None,
    first: Attempt | None = None,
) -> Flow[Lookup]:
    path = f"/v1/tables/{segment(table)}/keys/{segment(key)}"
    params = _params(max_lag=max_lag, min_offset=min_offset, wait_ms=wait_ms)
    extra = (wait_ms or 0) / 1000

    def plan() -> list[str]:
        return router.key(table, key)[1]

    response = ok(
        (
            yield from read(
                router,
                policy,
                plan,
                lambda url: Send("GET", url + path, params, headers=headers, extra_timeout_s=extra),
                position,
                first,
            )
        )
    )
    return lookup_of(table, key, response)


def lookup_of(table: str, key: str, response: httpx.Response) -> Lookup:
    """A lookup's answer (a success) as a ``Lookup``."""
    h = headers_of(response)
    return Lookup(
        table=table,
        key=key,
        value=value_of(response),
        partition=int(h.get("x-kiq-partition", -1)),
        offset=int(h.get("x-kiq-offset", -1)),
        served_by=h.get(SERVED_BY, ""),
        lag=int(h.get("x-kiq-lag", 0)),
        stale=h.get("x-kiq-stale") == "true",
        position=h.get(POSITION, ""),
    )


def multiget(
    router: Router,
    policy: RetryPolicy,
    table: str,
    keys: Iterable[str],
    headers: Mapping[str, str] | None = None,
    position: SessionPosition | None = None,
    consistent: Consistent = None,
) -> Flow[Many]:
    """Each owner asked for its own keys, all at once; keys whose owner and every other
    node failed are ``unavailable``. ``consistent="batch"``: every key in one request, to
    any node, which answers every partition as of one micro-batch."""
    wanted = list(dict.fromkeys(keys))
    if router.due():
        yield REFRESH
    if consistent is not None:
        path = f"/v1/tables/{segment(table)}/multiget?consistent={consistent}"
        answer = yield from _multiget_chunk(router, policy, path, "", wanted, headers, position)
        return Many(
            answer.get("found", {}),
            answer.get("missing", []),
            answer.get("unavailable", []),
            answer.get("batch"),
        )
    groups: dict[str, list[str]] = {}
    for key in wanted:
        first = router.key(table, key)[1][:1]
        groups.setdefault(first[0] if first else "", []).append(key)
    chunks = [
        (url, group[i : i + MULTIGET_CHUNK])
        for url, group in groups.items()
        for i in range(0, len(group), MULTIGET_CHUNK)
    ]
    path = f"/v1/tables/{segment(table)}/multiget"
    flows = tuple(
        _multiget_chunk(router, policy, path, url, chunk, headers, position)
        for url, chunk in chunks
    )
    answers: list[Any] = yield Fanout(flows)
    out = Many()
    for (_, chunk), answer in zip(chunks, answers, strict=True):
        if isinstance(answer, Unavailable):
            out.unavailable.extend(chunk)
        elif isinstance(answer, BaseException):
            raise answer
        else:
            out.found.update(answer.get("found", {}))
            out.missing.extend(answer.get("missing", []))
            out.unavailable.extend(answer.get("unavailable", []))
    return out


def _multiget_chunk(
    router: Router,
    policy: RetryPolicy,
    path: str,
    owner: str,
    keys: list[str],
    headers: Mapping[str, str] | None,
    position: SessionPosition | None = None,
) -> Flow[dict[str, Any]]:
    body = orjson.dumps({"keys": keys})
    sent = {**(headers or {}), "content-type": "application/json"}

    def plan() -> list[str]:
        return (
            [owner, *(u for u in router.anywhere() if u != owner)] if owner else router.anywhere()
        )

    response = yield from read(
        router,
        policy,
        plan,
        lambda url: Send("POST", url + path, content=body, headers=sent),
        position,
    )
    answer: dict[str, Any] = orjson.loads(ok(response).content)
    return answer


def page(
    router: Router,
    policy: RetryPolicy,
    path: str,
    params: Mapping[str, str],
    plan: Plan,
    headers: Mapping[str, str] | None = None,
    position: SessionPosition | None = None,
) -> Flow[dict[str, Any]]:
    """One page (a range, a key's windows, a top) as the node's JSON body."""
    response = yield from read(
        router,
        policy,
        plan,
        lambda url: Send("GET", url + path, params, headers=headers),
        position,
    )
    body: dict[str, Any] = orjson.loads(ok(response).content)
    return body


def range_page(body: Mapping[str, Any]) -> Page[Item]:
    items = [Item(i["key"], i["value"]) for i in body.get("items", [])]
    return Page(items, body.get("next_cursor"), body.get("batch"))


def prefix_plan(router: Router, table: str, prefix: str | None) -> Plan:
    """Where a scan under ``prefix`` goes: the one partition's replicas when the prefix
    names it (composite keys), else any node (it reads every partition)."""

    def plan() -> list[str]:
        info = router.table(table)
        partition = info.prefix_partition(prefix) if info is not None else None
        return router.anywhere() if partition is None else router.holders(table, partition)

    return plan


def metadata(
    router: Router, policy: RetryPolicy, headers: Mapping[str, str] | None = None
) -> Flow[dict[str, Any]]:
    response = yield from read(
        router, policy, router.anywhere, lambda url: Send("GET", url + METADATA, headers=headers)
    )
    body: dict[str, Any] = orjson.loads(ok(response).content)
    known = router.topology
    if known is not None and body.get("view_version") != known.view_version:
        router.mark_stale()
    return body


def _params(**given: int | str | None) -> dict[str, str] | None:
    out = {k: str(v) for k, v in given.items() if v is not None}
    return out or None


def params(**given: int | str | None) -> dict[str, str]:
    """Query parameters of the given ones that are set."""
    return _params(**given) or {}
