"""Exceptions raised by kiq.

Every error kiq raises on purpose derives from ``KiqError``; its message says
what to do next, and two class attributes say it to code: ``retriable`` (the same
call may succeed later) and ``owner_moved`` (ask another replica, not this one
again). The tree grows with the serving layer (``kiq.api.errors`` adds the HTTP
answers). An application takes the ones it meets from ``kiq`` itself (``KiqError``,
``WriteFailed``; docs/api.md), never from here::

    KiqError               retriable  owner_moved
    ├── ConfigError            -          -        fix the flag/env/TOML named
    ├── SetupError             -          -        run the make target named
    │   ├── BrokerError        -          -        the local broker did not start or stop
    │   └── SparkClusterError  -          -        the local Spark cluster did not start or stop
    ├── BadRecord              -          -        dead-letter the record, go on
    ├── StoreClosedError       yes        yes      the partition moved: ask its next replica
    ├── WriteFailed            yes        -        the log did not take a record: retry
    └── KafkaUnavailable       yes        -        Kafka did not answer: serve from the stores
"""

from __future__ import annotations

from typing import ClassVar


class KiqError(Exception):
    """Root of every error kiq raises on purpose."""

    retriable: ClassVar[bool] = False
    owner_moved: ClassVar[bool] = False


class ConfigError(KiqError):
    """A setting is missing, malformed or contradicts another one."""


class SetupError(KiqError):
    """A prerequisite (Java, jars, a tool) is missing; the message names the fix."""


class BrokerError(SetupError):
    """The local Kafka broker could not be started, reached or stopped."""


class SparkClusterError(SetupError):
    """The local Spark standalone master or worker could not be started, reached or stopped."""


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

    retriable = True
    owner_moved = True


class WriteFailed(KiqError):
    """The log did not acknowledge a record: nothing was written, the write may be retried."""

    retriable = True


class KafkaUnavailable(KiqError):
    """Kafka (a broker, the group coordinator) did not answer in time.

    A node keeps answering from its stores and asks again later.
    """

    retriable = True
