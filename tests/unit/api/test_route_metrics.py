"""/metrics and the dashboard count every route, the core's and an application's, each under
its declared pattern: one series per route, however many paths are asked for."""

from __future__ import annotations

import re

from kiq import Reply, Request, Routes, json_reply
from kiq.metrics import NodeMetrics
from kiq.testing import TestClient
from kiq.workers.state import report_of, take_report

WORD = "GET /v1/words/{word}"
TOP = "GET /v1/tables/{table}/top"
WINDOWS = "GET /v1/tables/{table}/keys/{key}/windows"


async def word(request: Request) -> Reply:
    if request.path_params["word"] == "boom":
        raise ValueError("a handler's bug")
    return json_reply({"word": request.path_params["word"]})


async def top(request: Request) -> Reply:
    return json_reply({"top": []})


def routes(app: Routes) -> None:
    app.get("/v1/words/{word}", word)
    app.get("/v1/words/top", top)


def requests_total(text: str) -> dict[tuple[str, str], float]:
    found = re.findall(r'^kiq_requests_total\{route="([^"]*)",status="(\d+)"\} (\S+)$', text, re.M)
    return {(route, status): float(n) for route, status, n in found}


def test_every_route_is_counted_by_its_pattern_in_metrics_and_on_the_dashboard() -> None:
    with TestClient(routes, tables={"counts": {"kafka": {"n": 3}}}) as client:
        for w in ("kafka", "spark", "kiq"):
            assert client.get(f"/v1/words/{w}").status_code == 200
        assert client.get("/v1/words/boom").status_code == 500
        assert client.get("/v1/words/top").status_code == 200
        assert client.get("/v1/tables/counts/top").status_code == 400  # not ranked
        assert client.get("/v1/tables/counts/keys/kafka/windows").status_code == 400
        assert client.get("/v1/tables/counts/keys/kafka").status_code == 200
        assert client.get("/v1/tables").status_code == 200
        counted = requests_total(client.get("/metrics").text)
        status = client.get("/v1/status").json()

    assert counted[(WORD, "200")] == 3 and counted[(WORD, "500")] == 1
    assert counted[("GET /v1/words/top", "200")] == 1
    assert counted[(TOP, "400")] == 1 and counted[(WINDOWS, "400")] == 1
    assert counted[("GET /v1/tables", "200")] == 1
    assert counted[("get", "200")] == 1  # the raw lookup path, as it always was
    assert not any("kafka" in route or "counts" in route for route, _ in counted)
    shown = status["routes"]
    assert shown[WORD]["requests"] == 4 and shown[WORD]["statuses"] == {"200": 3, "500": 1}
    assert shown[TOP]["statuses"] == {"400": 1} and shown[WINDOWS]["requests"] == 1
    assert shown["GET /metrics"]["requests"] == 1


def test_a_route_no_one_asked_for_has_no_series() -> None:
    with TestClient(routes) as client:
        counted = requests_total(client.get("/metrics").text)
    assert not any(route == WORD for route, _ in counted)


def test_the_dashboard_sums_what_read_workers_report() -> None:
    node, worker = NodeMetrics(), NodeMetrics()
    node.route(WORD).record(200, 0.001)
    worker.route(WORD).record(404, 0.002)
    take_report(report_of(1, 100, worker), node)
    assert node.route_totals()[WORD].statuses == {200: 1, 404: 1}
