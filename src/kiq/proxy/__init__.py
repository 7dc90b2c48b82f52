"""`kiq proxy`: a stateless HTTP front door that sends each request to its key's owner.

For clients that are not Python: they speak kiq's public API to the proxy, and the
proxy routes each call as ``kiq.client`` would (``targets.py``), in one hop
(``app.py``), under granian as a node is (``server.py``). What it admits is bounded
before a body is read (``limits.py``); it sends credentials only to the nodes it was
given or that they vouch for, and seals each caller's address for them (``trust.py``).
"""

from __future__ import annotations

from kiq.proxy.app import ProxyApp
from kiq.proxy.limits import ProxyLimits
from kiq.proxy.server import serve_proxy
from kiq.security.callers import CallerSeal

__all__ = ["CallerSeal", "ProxyApp", "ProxyLimits", "serve_proxy"]
