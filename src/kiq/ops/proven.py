"""Which members of the cluster this node names to a caller: only those it has proven.

A caller sends its token where the node points it: ``kiq.client`` to every URL in
``/v1/metadata``, a browser or proxy to a redirect's ``Location``. The group is where
members are *found* (anyone who may join it can claim to be ``kiq|n9|http://...``); the
hello challenge (``Peers.proven``) is what makes one a member. So ``/v1/metadata`` and
``?redirect=true`` name a member only once it has answered the challenge sealed; one not
yet asked is challenged then, waited for at most ``PROOF_WAIT_S`` (the request waits, the
event loop does not). This node is always proven to itself.
"""

from __future__ import annotations

import asyncio

from kiq.cluster import Member
from kiq.node import NodeView
from kiq.peers import Peers

# The longest /v1/metadata or a redirect waits for a member not yet proven to prove itself.
PROOF_WAIT_S = 1.0


async def proven_members(node: NodeView, peers: Peers) -> frozenset[Member]:
    """The members of the view this node has proven (itself included), each one not yet
    proven challenged now, all at once."""
    members = list(node.view.members.values())
    others = [m for m in members if m.node_id != node.node_id]
    proofs = await asyncio.gather(*(peers.proven(m.url, PROOF_WAIT_S) for m in others))
    kept = {m for m, ok in zip(others, proofs, strict=True) if ok}
    kept.update(m for m in members if m.node_id == node.node_id)
    return frozenset(kept)


async def may_redirect(node: NodeView, peers: Peers, url: str) -> bool:
    """Whether a redirect may send a caller to ``url``: another member's URL in the view
    (never an address only this node uses, a read worker's home), proven."""
    if not any(m.url == url and m.node_id != node.node_id for m in node.view.members.values()):
        return False
    return await peers.proven(url, PROOF_WAIT_S)
