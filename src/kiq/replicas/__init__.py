"""Local replicas of table partitions: stores kept up to date from Kafka.

A node holds a replica of every partition it is active or standby for; one
reader thread (the materializer) tails them all, so promoting a standby to
active changes a flag and nothing else.
"""

from kiq.replicas.materializer import Materializer
from kiq.replicas.replica import Replica
from kiq.replicas.state import ReplicaState, Role

__all__ = ["Materializer", "Replica", "ReplicaState", "Role"]
