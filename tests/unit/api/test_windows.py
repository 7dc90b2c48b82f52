"""GET /v1/tables/{t}/keys/{k}/windows and Tables.windows, on one node in process."""

from __future__ import annotations

import pytest

from kiq import Reply, Request, Routes, json_reply
from kiq.tables.declared import Declared
from kiq.testing import TestClient

MINUTES = Declared(table="minutes", topic="minutes", key=("user",), sep="|", window="w")
PLAIN = Declared(table="totals", topic="totals", key=("user",))


def _key(user: str, minute: int) -> str:
    start, end = f"2026-11-25T10:{minute:02d}:00.000Z", f"2026-11-25T10:{minute + 1:02d}:00.000Z"
    return f"{user}|{start}|{end}"


TABLES = {
    "minutes": {
        **{_key("alice", m): {"user": "alice", "views": m} for m in range(6)},
        _key("al", 0): {"user": "al", "views": 99},  # a key that starts like alice's
        _key("bob", 3): {"user": "bob", "views": 7},
        # keys written by something else than a pipeline: times to quote in the answer
        'eve|2026-11-25T10:00:00.000Z|a"b\\c': {"user": "eve", "views": 1},
        "eve|2026-11-25T10:01:00.000Z|été": {"user": "eve", "views": 2},
    },
    "totals": {"alice": {"views": 15}},
}


def routes(app: Routes) -> None:
    app.get("/v1/recent/{user}", recent)


async def recent(request: Request) -> Reply:
    page = await request.tables.windows(
        "minutes", request.path_params["user"], start="2026-11-25T10:02", order="desc", limit=2
    )
    return json_reply({"bounds": page.bounds(), "views": [v["views"] for v in page.parsed()]})


@pytest.fixture(scope="module")
def client():
    with TestClient(routes, tables=TABLES, declared=[MINUTES, PLAIN]) as client:
        yield client


def _starts(body: dict) -> list[str]:
    return [w["start"][11:16] for w in body["windows"]]


def test_a_keys_windows_come_oldest_first_with_their_bounds(client: TestClient) -> None:
    body = client.get("/v1/tables/minutes/keys/alice/windows").json()
    assert body["key"] == "alice" and body["next_cursor"] is None
    assert _starts(body) == ["10:00", "10:01", "10:02", "10:03", "10:04", "10:05"]
    first = body["windows"][0]
    assert first == {
        "start": "2026-11-25T10:00:00.000Z",
        "end": "2026-11-25T10:01:00.000Z",
        "value": {"user": "alice", "views": 0},
    }


def test_window_times_that_are_not_plain_ascii_are_quoted(client: TestClient) -> None:
    body = client.get("/v1/tables/minutes/keys/eve/windows").json()
    assert [(w["start"][11:16], w["end"], w["value"]["views"]) for w in body["windows"]] == [
        ("10:00", 'a"b\\c', 1),
        ("10:01", "été", 2),
    ]


def test_newest_first_a_page_at_a_time(client: TestClient) -> None:
    seen, cursor = [], None
    while True:
        params = {"order": "desc", "limit": 4, **({"cursor": cursor} if cursor else {})}
        body = client.get("/v1/tables/minutes/keys/alice/windows", params=params).json()
        seen += _starts(body)
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == ["10:05", "10:04", "10:03", "10:02", "10:01", "10:00"]


def test_from_and_to_bound_the_starts_in_any_time_form(client: TestClient) -> None:
    params = {"from": "2026-11-25T11:01:00+01:00", "to": "1795601040000"}  # 10:01 to 10:04
    body = client.get("/v1/tables/minutes/keys/alice/windows", params=params).json()
    assert _starts(body) == ["10:01", "10:02", "10:03"]


def test_no_windows_is_an_empty_page(client: TestClient) -> None:
    assert client.get("/v1/tables/minutes/keys/carol/windows").json()["windows"] == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v1/tables/totals/keys/alice/windows", "not windowed"),
        ("/v1/tables/minutes/keys/alice/windows?from=soon", "not a time"),
        ("/v1/tables/minutes/keys/alice/windows?order=sideways", "order"),
    ],
)
def test_bad_asks_are_400s_that_say_why(client: TestClient, path: str, message: str) -> None:
    resp = client.get(path)
    assert resp.status_code == 400 and message in resp.json()["message"], resp.text


def test_a_plain_lookup_of_a_windowed_key_still_answers(client: TestClient) -> None:
    assert client.get(f"/v1/tables/minutes/keys/{_key('bob', 3)}").json()["views"] == 7


def test_handlers_read_windows_through_tables(client: TestClient) -> None:
    assert client.get("/v1/recent/alice").json() == {
        "bounds": [
            ["2026-11-25T10:05:00.000Z", "2026-11-25T10:06:00.000Z"],
            ["2026-11-25T10:04:00.000Z", "2026-11-25T10:05:00.000Z"],
        ],
        "views": [5, 4],
    }
