"""What `kiq proxy` admits, decided before it reads a body: size by method, bytes held by
all requests together, requests at once; each refusal answered at once."""

from __future__ import annotations

import asyncio

import pytest

from kiq.proxy import ProxyApp, ProxyLimits
from tests.unit.proxy.asgi import Nodes, body_of, call, never_read, scope

MiB = 1024 * 1024


def proxy(**limits: int) -> tuple[ProxyApp, Nodes]:
    nodes = Nodes()
    return ProxyApp([Nodes.N1], limits=ProxyLimits(**limits), transport=nodes.transport), nodes


def test_a_declared_length_over_the_methods_cap_is_refused_unread():
    app, nodes = proxy()

    async def run() -> None:
        big = [("content-length", str(15 * MiB))]
        post = await call(app, scope("POST", "/v1/tables/t/multiget", big), never_read())
        assert post.status == 413 and b"too_large" in post.body
        small = [("content-length", str(64 * 1024))]
        get = await call(app, scope("GET", "/v1/tables/t/keys/a", small), never_read())
        assert get.status == 413
        junk = await call(app, scope("PUT", "/v1/x", [("content-length", "9" * 40)]), never_read())
        assert junk.status == 400

    asyncio.run(run())
    assert nodes.seen == [] and app.admission.in_flight == 0 and app.admission.requests == 0


def test_a_body_without_a_length_is_refused_once_it_passes_the_cap():
    app, _ = proxy(max_body_bytes=4 * MiB)
    chunks = [b"x" * MiB for _ in range(20)]
    given = body_of(*chunks)
    taken = 0

    async def receive():  # counts what the proxy read
        nonlocal taken
        taken += 1
        return await given()

    async def run() -> None:
        answer = await call(app, scope("POST", "/v1/tables/t/multiget"), receive)
        assert answer.status == 413

    asyncio.run(run())
    assert taken == 5, "the proxy read past the body cap"
    assert app.admission.in_flight == 0


def test_bodies_held_at_once_are_bounded_and_the_next_is_told_to_retry():
    app, _ = proxy(max_in_flight_bytes=10 * MiB, max_body_bytes=4 * MiB)
    length = [("content-length", str(4 * MiB))]

    async def run() -> None:
        # two callers send 4 MiB each, slowly: their lengths are held from the first byte
        slow = [
            asyncio.ensure_future(
                call(
                    app,
                    scope("POST", "/v1/tables/t/multiget", length),
                    body_of(b"x", unfinished=True),
                )
            )
            for _ in range(2)
        ]
        await asyncio.sleep(0.05)
        assert app.admission.in_flight == 8 * MiB
        third = await call(app, scope("POST", "/v1/tables/t/multiget", length), never_read())
        assert third.status == 503 and third.headers["retry-after"] == "1"
        # a chunked body is held as it comes, and refused when the total would pass
        chunked = await call(
            app, scope("POST", "/v1/tables/t/multiget"), body_of(b"y" * MiB, b"y" * MiB, b"y")
        )
        assert chunked.status == 503
        for task in slow:
            task.cancel()
        await asyncio.gather(*slow, return_exceptions=True)

    asyncio.run(run())
    assert app.admission.in_flight == 0 and app.admission.requests == 0


def test_requests_past_the_limit_are_503_with_retry_after_before_their_body_is_read():
    app, nodes = proxy(max_requests=3, max_streams=1)

    async def run() -> None:
        held = [
            asyncio.ensure_future(
                call(app, scope("POST", "/v1/x"), body_of(b"{", b"}", unfinished=True))
            )
            for _ in range(3)
        ]
        await asyncio.sleep(0.05)
        assert app.admission.requests == 3
        refused = await call(app, scope("GET", "/v1/tables/t/keys/a"), never_read())
        assert refused.status == 503 and refused.headers["retry-after"] == "1"
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        assert app.admission.requests == 0
        # a key's lookup goes through once there is room again
        ok = await call(app, scope("GET", "/v1/tables/t/keys/a"), body_of(b""))
        assert ok.status == 200, ok.body

    asyncio.run(run())
    assert [r.url.path for r in nodes.seen if r.url.path.startswith("/v1/tables/t/keys")] == [
        "/v1/tables/t/keys/a"
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"max_body_bytes": 0},
        {"max_requests": 0},
        {"max_in_flight_bytes": 0},
        {"max_streams": 0},
        {"max_small_body_bytes": -1},
    ],
)
def test_limits_must_be_positive(bad: dict[str, int]):
    with pytest.raises(ValueError, match="positive"):
        ProxyLimits(**bad)
