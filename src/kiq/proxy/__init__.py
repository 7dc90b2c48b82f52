"""`kiq proxy`: a stateless HTTP front door that sends each request to its key's owner.

For clients that are not Python: they speak kiq's public API to the proxy, and the
proxy routes each call as ``kiq.client`` would (``targets.py``), in one hop
(``app.py``), under granian as a node is (``server.py``).
"""

from __future__ import annotations

from kiq.proxy.app import ProxyApp
from kiq.proxy.server import serve_proxy

__all__ = ["ProxyApp", "serve_proxy"]
