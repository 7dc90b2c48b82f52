"""Parsing and checking request parameters: bad input is a 400, never a 500."""

from __future__ import annotations

import base64
from urllib.parse import unquote_to_bytes

from kiq.api.errors import BadRequest
from kiq.tables import MAX_KEY_BYTES


def key_from_path(raw: bytes) -> bytes:
    """The key in a URL path segment: percent-decoded, UTF-8, 1..MAX_KEY_BYTES bytes."""
    key = unquote_to_bytes(raw)
    return check_key(key)


def check_key(key: bytes) -> bytes:
    if not key:
        raise BadRequest("the key is empty")
    if len(key) > MAX_KEY_BYTES:
        raise BadRequest(f"the key is longer than {MAX_KEY_BYTES} bytes", length=len(key))
    try:
        key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest("the key is not valid UTF-8") from exc
    return key


def int_param(params: dict[str, str], name: str, low: int = 0, high: int = 2**62) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise BadRequest(f"{name} must be a whole number, got {raw!r}") from exc
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


def bool_param(params: dict[str, str], name: str) -> bool:
    raw = params.get(name, "").lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise BadRequest(f"{name} must be true or false, got {raw!r}")


def encode_cursor(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def decode_cursor(cursor: str) -> bytes:
    try:
        return base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (ValueError, TypeError) as exc:
        raise BadRequest("cursor is malformed: pass next_cursor exactly as returned") from exc
