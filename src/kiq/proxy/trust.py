"""Where the proxy may send a request at all, and the caller's address sealed on the way.

Every request the proxy makes (its own metadata reads with its token, callers' requests
with their ``Authorization``, relayed watches) leaves through ``Vouched``: as the httpx
transport (a ``kiq.http_client.Gate``), or asked by the pooled relay of GETs
(``relay.py``) before it sends one, so no path can miss it:

- it goes only to an origin the proxy was given (``--nodes``) or one a node it trusts
  names in ``/v1/metadata`` (the current topology's members: a node names only the
  members it has proven, ``kiq.ops.proven``). The topology is only ever read from such
  an origin, so the trust runs back to the configured nodes. Any other URL (a partition
  naming a URL that is not a member, a stale one) is refused before a connection is
  made, as a node that does not answer: the call goes on to the next replica.
- with the cluster secret (``--cluster-secret-file``), it carries ``X-Kiq-Caller``, the
  address of the caller it is made for (``CALLER``), sealed (``kiq.security.callers``),
  a fresh seal for every attempt, so a node counts its per-address limits against the
  caller and not the proxy.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from kiq.client.router import Router
from kiq.client.topology import Topology
from kiq.http_client import URL, AsyncTransport, Gate, Request
from kiq.security.callers import HEADER, CallerSeal

log = logging.getLogger(__name__)

# The address of the caller the current request is relayed for; None: the proxy's own call.
CALLER: ContextVar[str | None] = ContextVar("kiq_proxy_caller", default=None)
_MAX_LOGGED = 1000  # origins refused that are said once in the log, each
_PORTS = {"http": 80, "https": 443}


def origin_of(url: URL | str) -> str:
    """``scheme://host:port`` of ``url``, the port always written."""
    parsed = url if isinstance(url, URL) else URL(url)
    port = parsed.port or _PORTS.get(parsed.scheme, 0)
    return f"{parsed.scheme}://{parsed.host}:{port}"


class Vouched(Gate):
    """``inner`` for the origins ``router`` trusts; a ``ConnectError`` for any other."""

    def __init__(
        self, router: Router, inner: AsyncTransport, seal: CallerSeal | None = None
    ) -> None:
        super().__init__(inner)
        self._router = router
        self._seal = seal
        self._seeds = frozenset(origin_of(u) for u in router.seeds)
        self._for: Topology | None = None
        self._trusted = self._seeds
        self._logged: set[str] = set()
        self.refused = 0  # requests never sent: not to a vouched origin

    def trusted(self) -> frozenset[str]:
        """The configured origins and the members of the current topology."""
        topology = self._router.topology
        if topology is not self._for:
            members = frozenset(origin_of(u) for u in topology.urls) if topology else frozenset()
            self._trusted = self._seeds | members
            self._for = topology
        return self._trusted

    def admit(self, request: Request) -> str | None:
        refusal = self.refusal(origin_of(request.url))
        if refusal is None:
            seal = self.seal(request.method, request.url.raw_path.decode("latin-1"))
            if seal is not None:
                request.headers[HEADER] = seal
        return refusal

    def refusal(self, origin: str) -> str | None:
        """Why nothing may go to ``origin`` (``scheme://host:port``); None: it may."""
        if origin in self.trusted():
            return None
        self.refused += 1
        if origin not in self._logged and len(self._logged) < _MAX_LOGGED:
            self._logged.add(origin)
            log.warning("proxy refused: not a vouched node url=%s", origin)
        return f"{origin} is neither one of --nodes nor a member they vouch for"

    def seal(self, method: str, target: str) -> str | None:
        """``X-Kiq-Caller`` for a request made for ``CALLER`` (``target``: path and query as
        sent), a fresh seal each time; None without the secret or for the proxy's own."""
        address = CALLER.get()
        if self._seal is None or address is None:
            return None
        return self._seal.seal(method, target, address)
