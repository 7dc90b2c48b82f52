"""A lookup's outcome becomes an HTTP status in one place: ``api.errors.lookup_error``."""

from __future__ import annotations

import orjson

from kiq.api.errors import lookup_error
from kiq.peers import LookupResult, Outcome

STATUS = {
    Outcome.MISSING: (404, "not_found"),
    Outcome.MOVED: (421, "not_here"),
    Outcome.UNAVAILABLE: (503, "unavailable"),
    Outcome.BUSY: (429, "rate_limited"),
    Outcome.BAD_KEY: (400, "bad_request"),
    Outcome.FORBIDDEN: (403, "insufficient_scope"),
    Outcome.FAILED: (503, "unavailable"),
    Outcome.HEDGED: (503, "unavailable"),
    Outcome.NO_REPLICA: (503, "unavailable"),
}


def test_every_outcome_without_a_value_has_its_status():
    assert set(STATUS) == set(Outcome) - {Outcome.FOUND}
    for outcome, (status, code) in STATUS.items():
        error = lookup_error(LookupResult(outcome, 3, reason="why"), "t", 3, b"k")
        assert (error.status, error.code) == (status, code), outcome


def test_the_errors_say_what_the_outcome_carries():
    behind = LookupResult(Outcome.UNAVAILABLE, 3, offset=41, reason="t[3] has applied 41")
    body = orjson.loads(lookup_error(behind, "t", 3, b"k").body())
    assert body == {
        "error": "unavailable",
        "message": "t[3] has applied 41",
        "partition": 3,
        "applied_offset": 41,
        "reason": "min_offset not reached within wait_ms",
    }
    busy = lookup_error(LookupResult(Outcome.BUSY, reason="too many"), "t", 3, b"k")
    assert dict(busy.headers)[b"retry-after"] == b"1"
    forbidden = lookup_error(LookupResult(Outcome.FORBIDDEN), "t", 3, b"k")
    assert orjson.loads(forbidden.body())["scope"] == "kiq:read:t"
    nobody = LookupResult(Outcome.NO_REPLICA, reason="no other replica answered in time")
    body = orjson.loads(lookup_error(nobody, "t", 3, b"k").body())
    assert (body["message"], body["reason"]) == (
        "no replica of t[3] could answer",
        "no other replica answered in time",
    )
    missing = orjson.loads(lookup_error(LookupResult(Outcome.MISSING), "t", 3, b"k").body())
    assert (missing["key"], missing["table"], missing["partition"]) == ("k", "t", 3)
