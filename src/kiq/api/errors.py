"""API errors, and the one place they become HTTP statuses and JSON bodies."""

from __future__ import annotations

from typing import Any

import orjson

from kiq.errors import KiqError


class ApiError(KiqError):
    status = 500
    code = "internal"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def body(self) -> bytes:
        return orjson.dumps({"error": self.code, "message": self.message, **self.details})


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class UnknownTable(ApiError):
    status, code = 404, "unknown_table"


class KeyNotFound(ApiError):
    status, code = 404, "not_found"


class NotHere(ApiError):
    """This node holds no usable replica; the caller should try the next replica."""

    status, code = 421, "not_here"


class Unavailable(ApiError):
    """No replica could answer (all down, too far behind, or not caught up in time)."""

    status, code = 503, "unavailable"


def http_error(exc: ApiError) -> tuple[int, bytes]:
    return exc.status, exc.body()
