"""Cluster membership and partition ownership, coordinated through Kafka alone.

Every node joins one consumer group subscribed to the table topics: the group's
(cooperative) assignment says which node is *active* for each partition. Each
node reads the whole group's membership and assignment with the admin API, and
derives the *standbys* of every partition the same way on every node
(rendezvous hashing), so all nodes agree without talking to each other.
"""

from kiq.cluster.members import Member, admitted, decode_client_id, encode_client_id
from kiq.cluster.view import ClusterView, PartitionReplicas, Role, build_view

__all__ = [
    "ClusterView",
    "Member",
    "PartitionReplicas",
    "Role",
    "admitted",
    "build_view",
    "decode_client_id",
    "encode_client_id",
]
