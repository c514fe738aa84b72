"""exporter-toolkit's ``rate_limit``: one token bucket for the whole listener (429 when empty).

A token is added every ``interval`` up to ``burst`` tokens; each request takes one. The bucket
is shared by all clients, as in the toolkit: it protects the exporter, not fairness between
scrapers. Requests over the limit are answered before authentication, so they cost no bcrypt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, interval_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) / self.interval_s)
            self._updated = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
