"""The errors an application's handler raises, each answered with its HTTP status.

Defined with the core API's other errors (``kiq.api.errors``, the one place where errors
become responses); named here so the public API points into ``kiq.app`` alone.
"""

from kiq.api.errors import ApiError, BadRequest, KeyNotFound, Unavailable, UnknownTable
from kiq.errors import KiqError, WriteFailed

__all__ = [
    "ApiError",
    "BadRequest",
    "KeyNotFound",
    "KiqError",
    "Unavailable",
    "UnknownTable",
    "WriteFailed",
]
