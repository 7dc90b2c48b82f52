"""The reader load the integration tests drive: the one ``kiq bench failover`` uses."""

from kiq.bench.reader import LoadStats, ReaderLoad

__all__ = ["LoadStats", "ReaderLoad"]
