"""A Real-Time Mode query's input rate, counted by kiq while Spark cannot say it.

Spark reports a query's progress when a batch ends. A micro-batch ends every second or
so, and its rates are sound. A Real-Time Mode batch lasts ``realtime_batch`` (5 minutes
by default) while its tasks read and write every record as it arrives: until the first
batch ends the query has no progress at all, and afterwards its rates are the last
batch's averages. Spark's status store counts nothing either while its tasks run.

What kiq can count meanwhile is how fast rows arrive on the query's input topics: the
growth of their log ends, asked of Kafka at each publication. That is what Spark's own
``inputRowsPerSecond`` means (rows arriving per second), over the last ``WINDOW_S``
rather than over the last batch. How many of them the query has processed stays
unknown until the batch ends, so that rate remains Spark's.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping

# How far back the input rate looks, and the least time it needs between two samples.
WINDOW_S = 30.0
MIN_SPAN_S = 3.0

# How the Kafka source describes itself (``KafkaV2[Subscribe[a, b]]``); other strategies
# (a pattern, assigned partitions) name no topic list kiq can count.
_SUBSCRIBE = re.compile(r"^KafkaV2\[Subscribe\[(.*)\]\]$")


def subscribed_topics(descriptions: Iterable[str]) -> list[str]:
    """The topics a query's Kafka sources subscribe to, from their descriptions, sorted."""
    found: set[str] = set()
    for description in descriptions:
        match = _SUBSCRIBE.match(description.strip())
        if match is not None:
            found.update(t.strip() for t in match.group(1).split(",") if t.strip())
    return sorted(found)


def arrived(log_ends: Mapping[str, Mapping[int, int]]) -> int:
    """Every record ever written to these topics' partitions: the sum of their log ends."""
    return sum(sum(parts.values()) for parts in log_ends.values())


class ArrivalRate:
    """Rows per second arriving on a query's inputs over the last ``window_s``, from
    successive totals of their log ends (``arrived``)."""

    def __init__(self, window_s: float = WINDOW_S, min_span_s: float = MIN_SPAN_S) -> None:
        self._window_ms = window_s * 1000
        self._min_span_ms = min_span_s * 1000
        self._samples: deque[tuple[int, int]] = deque()

    def add(self, at_ms: int, total: int) -> float | None:
        """The rate with ``total`` counted at ``at_ms``; None until two samples lie at least
        ``min_span_s`` apart. A total that shrinks (a topic deleted and made again, the
        inputs changed) starts the count afresh."""
        if self._samples and (total < self._samples[-1][1] or at_ms < self._samples[-1][0]):
            self._samples.clear()
        self._samples.append((at_ms, total))
        # The base the rate is measured from: the newest sample a window old or older.
        while len(self._samples) > 2 and at_ms - self._samples[1][0] >= self._window_ms:
            self._samples.popleft()
        first_ms, first = self._samples[0]
        span_ms = at_ms - first_ms
        if span_ms < self._min_span_ms:
            return None
        return round((total - first) * 1000 / span_ms, 1)
