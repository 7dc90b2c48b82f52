"""Calls written once for both clients: a flow yields steps, a driver carries them out.

A flow (``Flow[T]``) is a generator that yields what it needs done (``Send`` a
request, ``Sleep``, ``Refresh`` the cluster's metadata, ``Fanout`` several flows
at once) and is sent the outcome (a response; for ``Send`` a connection error is
thrown into it instead). ``run_sync`` and ``run_async`` drive a flow with httpx's
``Client`` and ``AsyncClient``: the routing, retries and answers live in the flows
alone, so the blocking and the asyncio client cannot drift apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import httpx

T = TypeVar("T")


@dataclass(frozen=True)
class Send:
    """One HTTP request; ``extra_timeout_s`` is added to the client's (a lookup's wait)."""

    method: str
    url: str
    params: Mapping[str, str] | None = None
    content: bytes | None = None
    headers: Mapping[str, str] | None = None
    extra_timeout_s: float = 0.0


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Refresh:
    """Ask for the cluster's metadata again (one refresh at a time per client)."""


@dataclass(frozen=True)
class Fanout:
    """Run ``flows`` at once; the outcome is each one's result or the exception it raised."""

    flows: tuple[Flow[Any], ...] = field(default=())


Step = Send | Sleep | Refresh | Fanout
Flow = Generator[Step, Any, T]
REFRESH = Refresh()


def call(request: Send) -> Flow[httpx.Response]:
    """``response = yield from call(Send(...))``: a typed send."""
    response = yield request
    return cast(httpx.Response, response)


def _timeout(http: httpx.Client | httpx.AsyncClient, extra_s: float) -> httpx.Timeout | None:
    if not extra_s:
        return None
    base = http.timeout
    read = None if base.read is None else base.read + extra_s
    return httpx.Timeout(base.connect, read=read, write=base.write, pool=base.pool)


def _request(http: httpx.Client | httpx.AsyncClient, step: Send) -> httpx.Request:
    timeout = _timeout(http, step.extra_timeout_s)
    return http.build_request(
        step.method,
        step.url,
        params=step.params,
        content=step.content,
        headers=step.headers,
        extensions={"timeout": timeout.as_dict()} if timeout is not None else None,
    )


def run_sync(flow: Flow[T], http: httpx.Client, refresh: Callable[[], None]) -> T:
    """Carry ``flow`` out with a blocking client; ``refresh`` runs a ``Refresh``."""
    outcome: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.send(outcome) if error is None else flow.throw(error)
        except StopIteration as stop:
            return cast(T, stop.value)
        outcome, error = None, None
        if isinstance(step, Send):
            try:
                outcome = http.send(_request(http, step))
            except httpx.TransportError as exc:
                error = exc
        elif isinstance(step, Sleep):
            time.sleep(step.seconds)
        elif isinstance(step, Refresh):
            refresh()
        else:
            outcome = [_settle(f, http, refresh) for f in step.flows]


def _settle(flow: Flow[Any], http: httpx.Client, refresh: Callable[[], None]) -> object | Exception:
    """A fanned-out flow's result, or what it raised (as ``asyncio.gather`` gives it)."""
    try:
        result: object = run_sync(flow, http, refresh)
        return result
    except Exception as exc:
        return exc


async def run_async(
    flow: Flow[T], http: httpx.AsyncClient, refresh: Callable[[], Awaitable[None]]
) -> T:
    """Carry ``flow`` out with an asyncio client; a ``Fanout``'s flows run concurrently."""
    return await drive(flow, lambda step: http.send(_request(http, step)), refresh)


async def drive(
    flow: Flow[T],
    send: Callable[[Send], Awaitable[Any]],
    refresh: Callable[[], Awaitable[None]],
) -> T:
    """Carry ``flow`` out in asyncio, each ``Send`` through ``send`` (an httpx client's,
    or ``kiq proxy``'s pooled relay); its ``TransportError`` is the flow's to handle."""
    outcome: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.send(outcome) if error is None else flow.throw(error)
        except StopIteration as stop:
            return cast(T, stop.value)
        outcome, error = None, None
        if isinstance(step, Send):
            try:
                outcome = await send(step)
            except httpx.TransportError as exc:
                error = exc
        elif isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
        elif isinstance(step, Refresh):
            await refresh()
        else:
            outcome = list(
                await asyncio.gather(
                    *(drive(f, send, refresh) for f in step.flows), return_exceptions=True
                )
            )
