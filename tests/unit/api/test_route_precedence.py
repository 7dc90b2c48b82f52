"""Which of an application's routes answers a path several match: the most specific, whatever
the order they were declared in; two that can never both be reached stop the node at start."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kiq import Reply, Request, Routes, json_reply
from kiq.api.precedence import shape, specificity
from kiq.errors import ConfigError
from kiq.testing import TestClient


def answers(name: str) -> Callable[[Request], object]:
    async def handler(request: Request) -> Reply:
        return json_reply({"route": name, **request.path_params})

    return handler


WORDS = [
    ("/v1/words/{word}", "word"),
    ("/v1/words/top", "top"),
    ("/v1/words/{rest:path}", "rest"),
    ("/v1/words/{n:int}/rank", "rank"),
    ("/v1/words/{word}/rank", "word-rank"),
]


def declare(order: list[tuple[str, str]]) -> Callable[[Routes], None]:
    def routes(app: Routes) -> None:
        for path, name in order:
            app.get(path, answers(name))  # type: ignore[arg-type]

    return routes


@pytest.mark.parametrize("order", [WORDS, WORDS[::-1]], ids=["parameter-first", "literal-first"])
def test_the_most_specific_route_answers_whatever_the_declared_order(
    order: list[tuple[str, str]],
) -> None:
    with TestClient(declare(order)) as client:
        assert client.get("/v1/words/top").json() == {"route": "top"}
        assert client.get("/v1/words/kafka").json() == {"route": "word", "word": "kafka"}
        assert client.get("/v1/words/a/b/c").json() == {"route": "rest", "rest": "a/b/c"}
        assert client.get("/v1/words/7/rank").json() == {"route": "rank", "n": 7}
        assert client.get("/v1/words/x/rank").json() == {"route": "word-rank", "word": "x"}


def test_a_catch_all_at_the_root_comes_after_every_other_route() -> None:
    def routes(app: Routes) -> None:
        app.get("/{p:path}", answers("any"))  # type: ignore[arg-type]
        app.get("/shop/{item}", answers("item"))  # type: ignore[arg-type]
        app.get("/shop/{p:path}/edit", answers("edit"))  # type: ignore[arg-type]

    with TestClient(routes) as client:
        assert client.get("/shop/pen").json() == {"route": "item", "item": "pen"}
        assert client.get("/shop/a/b/edit").json() == {"route": "edit", "p": "a/b"}
        assert client.get("/elsewhere/x").json() == {"route": "any", "p": "elsewhere/x"}


def test_routes_of_another_method_do_not_shadow() -> None:
    def routes(app: Routes) -> None:
        app.post("/v1/words/{word}", answers("post-word"))  # type: ignore[arg-type]
        app.get("/v1/words/top", answers("top"))  # type: ignore[arg-type]

    with TestClient(routes) as client:
        assert client.post("/v1/words/top").json() == {"route": "post-word", "word": "top"}
        assert client.get("/v1/words/top").json() == {"route": "top"}
        assert client.get("/v1/words/kafka").status_code == 404


def test_specificity_ranks_each_segment_from_the_left() -> None:
    paths = [
        "/{p:path}",
        "/a/{p:path}",
        "/a/{p:path}/edit",
        "/a/{x}",
        "/a/{x:int}",
        "/a/{x}.json",
        "/a/b",
        "/a/{x}/c",
        "/a/b/{y}",
    ]
    assert sorted(paths, key=specificity) == [
        "/a/b/{y}",
        "/a/b",
        "/a/{x}.json",
        "/a/{x:int}",
        "/a/{x}/c",
        "/a/{x}",
        "/a/{p:path}/edit",
        "/a/{p:path}",
        "/{p:path}",
    ]


def test_a_shape_leaves_the_names_out() -> None:
    assert shape("/v1/words/{word}") == shape("/v1/words/{w:str}") == "/v1/words/{:str}"
    assert shape("/v1/words/{n:int}") != shape("/v1/words/{word}")


def test_a_route_only_its_parameters_names_tell_apart_is_refused() -> None:
    app = Routes()
    app.get("/v1/words/{word}", answers("word"))  # type: ignore[arg-type]
    app.post("/v1/words/{w}", answers("post"))  # another method: both reachable
    with pytest.raises(ConfigError, match=r"GET /v1/words/\{w\} could never be reached.*"):
        app.get("/v1/words/{w}", answers("w"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="declared twice"):
        app.get("/v1/words/{word}", answers("again"))  # type: ignore[arg-type]
