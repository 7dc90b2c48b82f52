"""How often and how soon a read is tried again: capped exponential backoff, full jitter.

Every call the client makes is a read, and reads are idempotent, so a failed one
(no answer, 503, 421, 429) is asked again: of the partition's next replica first,
then after a pause that doubles each time, so a cluster in failover is not stormed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kiq.client.errors import ClientError, RateLimited


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` per call in all (1: no retry); pauses from ``backoff_s`` doubling up to
    ``max_backoff_s``, each drawn at random below that bound (full jitter)."""

    attempts: int = 4
    backoff_s: float = 0.05
    max_backoff_s: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff_s < 0 or self.max_backoff_s < self.backoff_s:
            raise ValueError(f"a retry policy needs attempts >= 1 and 0 <= backoff <= max: {self}")

    def delay(self, attempt: int, error: ClientError | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based) before the next."""
        if isinstance(error, RateLimited):
            return min(error.retry_after_s, self.max_backoff_s * 4)
        bound = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        return random.uniform(0, bound)


NO_RETRY = RetryPolicy(attempts=1)
