"""Which route answers a path two patterns match: the more specific, whatever the order declared.

Starlette tries routes in list order, so ``/v1/words/{word}`` declared before
``/v1/words/top`` would answer ``top`` itself. The routers are built in the order of
``specificity`` instead: paths are compared segment by segment from the left, and at
the first segment that differs the lower rank goes first:

  0  a literal segment                        top
  1  text and parameters in one segment       {name}.json
  2  a typed parameter                        {id:int}, {x:float}, {u:uuid}
  3  a parameter                              {word}
  4  a catch-all (any segment with a path)    {rest:path}

A path that ends where another goes on comes after it (``/files/{p:path}/edit``
before ``/files/{p:path}``); equal ranks keep the order declared. Two routes of one
method whose paths differ only in their parameters' names (``shape``) can never both
be reached: ``Routes.add`` refuses the second when the node starts.
"""

from __future__ import annotations

import re

# Starlette's own parameter syntax (starlette.routing.PARAM_REGEX).
_PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(:[a-zA-Z_][a-zA-Z0-9_]*)?}")
_TYPED = frozenset({":int", ":float", ":uuid"})

LITERAL, MIXED, TYPED, PARAMETER, CATCH_ALL = range(5)
_END = CATCH_ALL + 1  # where a path ends: after any segment another path still has


def _rank(segment: str) -> int:
    params = list(_PARAM.finditer(segment))
    if not params:
        return LITERAL
    if any(p.group(2) == ":path" for p in params):
        return CATCH_ALL
    if len(params) > 1 or params[0].group(0) != segment:
        return MIXED
    return TYPED if params[0].group(2) in _TYPED else PARAMETER


def specificity(path: str) -> tuple[int, ...]:
    """``path``'s sort key: its segments' ranks from the left, then the end (lower first)."""
    return (*(_rank(s) for s in path.split("/")[1:]), _END)


def shape(path: str) -> str:
    """``path`` with its parameters' names left out: two paths of one shape match the same
    requests (``/v1/words/{word}`` and ``/v1/words/{w}`` are ``/v1/words/{:str}``)."""
    return _PARAM.sub(lambda m: "{" + (m.group(2) or ":str") + "}", path)
