"""Exceptions raised by kiq.

Every error kiq raises on purpose derives from ``KiqError``; its message says
what to do next. The tree grows with the serving layer::

    KiqError
    ├── ConfigError        bad or contradictory settings: fix the flag/env/TOML named
    └── SetupError         something kiq needs is not installed: run the make target named
        └── BrokerError    the local broker did not start or stop as asked
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
