"""Exceptions raised by kiq.

Every error kiq raises on purpose derives from ``KiqError``; its message says
what to do next. The tree grows with the serving layer::

    KiqError
    ├── ConfigError        bad or contradictory settings: fix the flag/env/TOML named
    ├── SetupError         something kiq needs is not installed: run the make target named
    │   └── BrokerError    the local broker did not start or stop as asked
    ├── BadRecord          a Kafka record's value cannot be decoded: dead-letter it, go on
    ├── StoreClosedError   a partition store was closed under a reader: find the owner, retry
    └── KafkaUnavailable   Kafka did not answer in time: serve from the stores, retry later
"""

from __future__ import annotations


class KiqError(Exception):
    """Root of every error kiq raises on purpose."""


class ConfigError(KiqError):
    """A setting is missing, malformed or contradicts another one."""


class SetupError(KiqError):
    """A prerequisite (Java, jars, a tool) is missing; the message names the fix."""


class BrokerError(SetupError):
    """The local Kafka broker could not be started, reached or stopped."""


class BadRecord(KiqError):
    """A record's value cannot be decoded for its table.

    Not fatal: the materializer sends the record and ``reason`` to the
    dead-letter topic and moves on, so one bad producer cannot stall a partition.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoreClosedError(KiqError):
    """A partition store was closed (partition revoked or node stopping) during a call.

    Retriable: look the key's owner up again and ask it; never read as "key absent".
    """


class KafkaUnavailable(KiqError):
    """Kafka (a broker, the group coordinator) did not answer in time.

    Retriable: a node keeps answering from its stores and asks again later.
    """
