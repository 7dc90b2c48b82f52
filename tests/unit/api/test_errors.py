"""The one door from exceptions to responses."""

from __future__ import annotations

import logging

import orjson
import pytest

from kiq.api.errors import ApiError, BadRequest, NotHere, Unavailable, error_response
from kiq.errors import ConfigError, KiqError, StoreClosedError, WriteFailed

SCOPE = {"method": "GET", "path": "/v1/tables/t/keys/k"}


def test_an_api_error_answers_as_itself():
    status, body = error_response(BadRequest("the key is empty", length=0), SCOPE)
    assert status == 400
    assert orjson.loads(body) == {
        "error": "bad_request",
        "message": "the key is empty",
        "length": 0,
    }


def test_a_retriable_error_is_a_503_that_names_no_path(caplog: pytest.LogCaptureFixture):
    status, body = error_response(StoreClosedError("partition store /srv/x/3 is closed"), SCOPE)
    assert status == 503
    answer = orjson.loads(body)
    assert answer["error"] == "unavailable" and "/srv" not in body.decode()
    assert answer["reason"] == "the partition moved during the request"


def test_anything_else_is_a_logged_500_that_says_nothing(caplog: pytest.LogCaptureFixture):
    for exc in (KeyError("internal detail"), ConfigError("internal detail")):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="kiq.api.errors"):
            status, body = error_response(exc, SCOPE)
        assert status == 500 and b"internal detail" not in body
        assert orjson.loads(body)["error"] == "internal"
        assert "internal detail" in caplog.text and "/v1/tables/t/keys/k" in caplog.text


@pytest.mark.parametrize(
    ("error", "retriable", "owner_moved"),
    [
        (KiqError, False, False),
        (BadRequest, False, False),
        (ApiError, False, False),
        (NotHere, True, True),
        (Unavailable, True, False),
        (StoreClosedError, True, True),
        (WriteFailed, True, False),
    ],
)
def test_errors_say_whether_to_retry_and_whether_the_owner_moved(
    error: type[KiqError], retriable: bool, owner_moved: bool
):
    assert (error.retriable, error.owner_moved) == (retriable, owner_moved)
