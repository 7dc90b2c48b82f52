"""Where the client's token may go: the origins it was given, and those a trusted node vouches for.

A token with ``kiq:admin`` may switch and retire tables, so it must reach kiq nodes only.
The client is given some nodes' URLs (its seeds) and learns the others from
``GET /v1/metadata``, which a node answers naming only the members it has proven hold the
cluster secret. So the token goes to an origin (scheme, host, port) that is a seed, or
that appears in the metadata last read from a node the client already trusted; never to
one it heard of any other way (a redirect's ``Location``: the client follows none, a
header, an error message). ``Credentials`` applies that rule to every request the client's
httpx client sends, whatever sent it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable

import httpx

Origin = tuple[str, str, int]  # scheme, host, port (the scheme's default when not given)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: httpx.URL | str) -> Origin | None:
    """``url``'s origin, or None for one that is not an absolute http(s) URL."""
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except httpx.InvalidURL:
        return None
    scheme = parsed.scheme
    default = _DEFAULT_PORTS.get(scheme)
    if default is None or not parsed.host:
        return None
    return scheme, parsed.host, parsed.port or default


def origins(urls: Iterable[str]) -> frozenset[Origin]:
    return frozenset(o for u in urls if (o := origin_of(u)) is not None)


class Credentials(httpx.Auth):
    """``Authorization: Bearer <token>`` on a request to a trusted origin, on no other.

    ``trusted``: the origins trusted now (``Router.trusted``; it changes as the metadata
    does). A verdict is kept per (scheme, host:port) as sent until the trusted set
    changes: the check costs a dict lookup on the hot path.
    """

    def __init__(self, token: str, trusted: Callable[[], frozenset[Origin]]) -> None:
        self._value = f"Bearer {token}"
        self._trusted = trusted
        # The trusted set the verdicts were made for, and they: swapped as one (threads).
        self._cache: tuple[frozenset[Origin] | None, dict[tuple[bytes, bytes], bool]] = (None, {})

    def allows(self, url: httpx.URL) -> bool:
        """Whether the token may be sent to ``url``."""
        trusted = self._trusted()
        of, verdicts = self._cache
        if of is not trusted:
            verdicts = {}
            self._cache = (trusted, verdicts)
        key = (url.raw_scheme, url.netloc)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = origin_of(url) in trusted
            verdicts[key] = verdict
        return verdict

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.allows(request.url):
            request.headers["authorization"] = self._value
        else:
            request.headers.pop("authorization", None)  # one a caller's headers carried
        yield request
