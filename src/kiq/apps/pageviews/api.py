"""The page-views routes: a page's minutes, a visitor's own hours, a country's day.

On nodes with authentication a visitor reads only their own hours: a token whose subject
is another visitor is refused, unless it carries ``kiq:admin``.
"""

from __future__ import annotations

from kiq import ApiError, BadRequest, KeyNotFound, Reply, Request, Routes, json_reply

MAX_WINDOWS = 1000


class NotYours(ApiError):
    """403: a visitor asking for another visitor's hours."""

    status, code = 403, "forbidden"


def routes(app: Routes) -> None:
    app.get("/v1/pages/minutes", page_minutes)
    app.get("/v1/visitors/{user}/hours", visitor_hours)
    app.get("/v1/countries/{country}/days/{day}", country_day)


async def page_minutes(request: Request) -> Reply:
    """A page's minutes starting from ``from`` to ``to`` (``2026-11-25T10:00``), newest first with
    ``order=desc``; the page is a query parameter since it holds slashes."""
    page = request.query.get("page")
    if not page or not page.startswith("/"):
        raise BadRequest("give page=/path")
    return await _windows(request, "page-minutes", page)


async def visitor_hours(request: Request) -> Reply:
    """A visitor's hours; with authentication, only the visitor's own (or an admin's)."""
    user = request.path_params["user"]
    caller = request.principal
    if caller is not None and caller.subject != user and "kiq:admin" not in caller.scopes:
        raise NotYours(f"{caller.subject} may read only their own hours")
    return await _windows(request, "visitor-hours", user)


async def country_day(request: Request) -> Reply:
    """One country's views on one UTC day (``2026-11-25``)."""
    country, day = request.path_params["country"].upper(), request.path_params["day"]
    page = await request.tables.windows("country-days", country, start=day, limit=1)
    if not page.items or not page.bounds()[0][0].startswith(day):
        raise KeyNotFound(f"no views from {country} on {day}")
    return json_reply(page.fragments()[0])


async def _windows(request: Request, table: str, entity: str) -> Reply:
    """One entity's windows starting in [from, to), a page at a time, in either order."""
    order = request.query.get("order", "asc")
    if order not in ("asc", "desc"):
        raise BadRequest("order must be asc or desc")
    page = await request.tables.windows(
        table,
        entity,
        start=request.query.get("from"),
        end=request.query.get("to"),
        cursor=request.query.get("cursor"),
        limit=request.int_param("limit", 1, MAX_WINDOWS) or 100,
        order="desc" if order == "desc" else "asc",
    )
    return json_reply({"windows": page.fragment_windows(), "next_cursor": page.next_cursor})
