"""Reads by a secondary index (``GET /v1/tables/{t}/by/{field}[/{value}]``): the request a
``by`` call makes, and its page.

An equality puts the value in the URL path as one segment; a range puts its ends in
``from`` and ``to``. A number is written so the node parses it back to the same double;
``true``/``false`` and non-finite numbers are refused here, as no index holds them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kiq.client.calls import Consistent, params, segment
from kiq.client.results import Item, Page

IndexValue = str | int | float


def text_of(value: IndexValue) -> str:
    """``value`` as the node reads it: a text as is, a number in its shortest exact form."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"an index holds texts and numbers, not {type(value).__name__}: {value!r}")
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"an index holds finite numbers only, not {value!r}")
    return repr(value)


def value_segment(value: IndexValue) -> str:
    """``value`` as one path segment (``segment`` escapes ``.`` and ``..`` too)."""
    return segment(text_of(value))


def by_request(
    table: str,
    field: str,
    value: IndexValue | None,
    low: IndexValue | None,
    high: IndexValue | None,
    order: str,
    limit: int | None,
    cursor: str | None,
    count: bool,
    consistent: Consistent,
) -> tuple[str, dict[str, str]]:
    """The path and query of one page: equality when ``value`` is given, else the range
    ``low``..``high`` (both included, either open). An equality on the empty text asks the
    range "".."" (the same rows, in the same order): an empty path segment names no route."""
    if value is not None and (low is not None or high is not None):
        raise ValueError("give either value (equality) or low/high (a range), not both")
    path = f"/v1/tables/{segment(table)}/by/{segment(field)}"
    query = params(order=order, limit=limit, cursor=cursor, consistent=consistent)
    if count:
        query["count"] = "true"
    if value is not None and text_of(value) != "":
        return f"{path}/{value_segment(value)}", query
    if value is not None:
        low = high = ""
    ends = {"from": low, "to": high}
    query.update({name: text_of(end) for name, end in ends.items() if end is not None})
    return path, query


def by_page(body: Mapping[str, Any]) -> Page[Item]:
    """A node's answer as the client's ``Page``, with ``count`` when it was asked for."""
    items = [Item(i["key"], i["value"]) for i in body.get("items", [])]
    return Page(items, body.get("next_cursor"), body.get("batch"), body.get("count"))
