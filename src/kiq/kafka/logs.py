"""librdkafka's log lines and client errors, through Python logging, rate limited.

Left alone, every client of a node prints "Connect ... failed: Connection refused"
several times a second while the broker is away (1,600 lines per node in a 30 s
outage). Every kiq client hands its logs and errors to the one ``KAFKA_LOG`` of
the process instead, which turns an outage into three kinds of line:

  kafka unreachable: <first failure>                        once, when it starts
  kafka still unreachable after 60s: N client messages ...  once a minute
  kafka reachable again after 31.2s: N client messages ...  once, when it ends

The end of an outage is not a librdkafka log line: the parts of a node that see
Kafka answer (a fetch, a group description) call ``reachable()``. A broker that
refuses kiq's SASL credentials is no outage: it is an error, logged as one (at
most once a minute) and counted, so ``kiq.kafka.admin`` can say so instead of
"no answer". Any other line passes at most once a minute per librdkafka
facility, with a count of the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

log = logging.getLogger("kiq.kafka.client")

SUMMARY_EVERY_S = 60.0

# Client errors that mean "the broker cannot be reached", not "this request is wrong".
_UNREACHABLE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
    }
)
_UNREACHABLE_WORDS = ("Connection refused", "Disconnected", "brokers are down", "Connect to ")
_REFUSED_WORDS = ("SASL authentication error", "Authentication failed")


class KafkaLog:
    """Where every kiq Kafka client logs (``logger``) and reports errors (``error_cb``)."""

    def __init__(
        self,
        logger: logging.Logger = log,
        every_s: float = SUMMARY_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._suppressed = 0
        self._last = ""
        self._next_summary = 0.0
        self._quiet_until: dict[str, tuple[float, int]] = {}
        self.auth_failures = 0
        self.last_auth_failure = ""

    @property
    def down(self) -> bool:
        """True from the first sign of an outage until something saw Kafka answer."""
        return self._down_since is not None

    def client_config(self) -> dict[str, Any]:
        """The settings that route a client's logs and errors here."""
        return {"logger": self, "error_cb": self.error}

    # -- what librdkafka calls --------------------------------------------------

    def log(self, level: int, fmt: str, *args: Any) -> None:
        """confluent-kafka's logger interface: ``(level, "%s [%s] %s", facility, client, text)``."""
        facility = str(args[0]) if len(args) == 3 else ""
        text = str(args[2]) if len(args) == 3 else fmt % args
        if any(word in text for word in _REFUSED_WORDS):
            self.refused(text)
        elif facility == "FAIL" or any(word in text for word in _UNREACHABLE_WORDS):
            self.unreachable(text)
        else:
            self._limited(level, facility or "librdkafka", text)

    def error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            self.refused(err.str())
        elif err.fatal():
            self._log.error("kafka client fatal error code=%s: %s", err.name(), err.str())
        elif err.code() in _UNREACHABLE_CODES:
            self.unreachable(err.str())
        else:
            self._limited(logging.WARNING, err.name(), f"kafka client error: {err.str()}")

    def refused(self, detail: str) -> None:
        """The broker refused kiq's credentials: a setting to fix, not an outage."""
        with self._lock:
            self.auth_failures += 1
            self.last_auth_failure = detail
        self._limited(
            logging.ERROR,
            "authentication",
            f"kafka refused kiq's credentials: {detail}; check [kafka] security_protocol, "
            "sasl_mechanism, sasl_username and sasl_password_file",
        )

    # -- the outage ---------------------------------------------------------------

    def unreachable(self, detail: str) -> None:
        with self._lock:
            now = self._clock()
            if self._down_since is None:
                self._down_since, self._suppressed = now, 0
                self._next_summary = now + self._every_s
                self._log.warning("kafka unreachable: %s", detail)
                return
            self._suppressed += 1
            self._last = detail
            if now < self._next_summary:
                return
            self._next_summary = now + self._every_s
            down_s, suppressed = now - self._down_since, self._suppressed
        self._log.warning(
            "kafka still unreachable after %.0fs: %d client messages suppressed, last: %s",
            down_s,
            suppressed,
            detail,
        )

    def reachable(self) -> None:
        """Something saw Kafka answer. Cheap when nothing was wrong: called per fetch."""
        if not self.down:
            return
        with self._lock:
            since, self._down_since = self._down_since, None
            suppressed = self._suppressed
        if since is None:  # another thread saw it first
            return
        self._log.warning(
            "kafka reachable again after %.1fs: %d client messages suppressed",
            self._clock() - since,
            suppressed,
        )

    # -- everything else ----------------------------------------------------------

    def _limited(self, level: int, key: str, text: str) -> None:
        with self._lock:
            now = self._clock()
            until, suppressed = self._quiet_until.get(key, (0.0, 0))
            if now < until:
                self._quiet_until[key] = (until, suppressed + 1)
                return
            self._quiet_until[key] = (now + self._every_s, 0)
        if suppressed:
            text = f"{text} ({suppressed} more like it since the last one shown)"
        self._log.log(level, "kafka client %s: %s", key, text)


KAFKA_LOG = KafkaLog()
