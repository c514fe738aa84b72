"""Retry pacing for every retrying client: one attempt per growing window.

The one backoff of the package: the API watches, the kubelet client, the counters ConfigMap, the
NVML start-up retry, the thread supervisor, the remediator's API writes and drain, and the report's
Prometheus client all pace their retries here, so every one of them is jittered, bounded and
honours ``Retry-After`` where the server sends it.

A DaemonSet multiplies every retry by the number of nodes. An API server answering ``410 Gone`` or
``500`` to one exporter answers it to all of them, so a retry loop without backoff on 5,000 nodes is
a denial-of-service attack on the component that is already in trouble. The schedule here bounds
what one node can send and spreads what the fleet sends:

* the k-th consecutive failure opens **window k**, of length ``min(max_s, initial_s * factor**(k-1))``;
  window k starts where window k-1 ended (or when the failed attempt ended, if that is later, or when
  the server's ``Retry-After`` allows, if that is later still);
* the next attempt happens at a uniformly random moment inside that window ("full jitter").

Consequences, each checked by tests:

* **a hard budget**: windows do not overlap and each holds one attempt, so a failure episode lasting
  ``T`` seconds makes at most ``BackoffPolicy.max_attempts(T)`` attempts, whatever the failure;
  at the cap, exactly one attempt per ``max_s`` on average;
* **no thundering herd**: nodes that failed at the same moment (an API server restart cuts every
  watch at once) have the same windows, and their attempts are spread uniformly over each window
  instead of arriving together;
* **Retry-After is honoured** (429 from API Priority and Fairness, 503/504 with the header): the
  window starts no earlier than the server asked, and the attempts still spread over the window
  behind it, so a fleet told "retry after 1 s" does not come back in the same millisecond. A
  ``Retry-After`` longer than ``retry_after_max_s`` is cut to it (a broken proxy must not park the
  exporter for a day).

Callers decide when an episode is over (``reset``): the watch loop after a watch stayed healthy for a
while, the kubelet client after any good answer. ``random_fraction`` is injectable, and every caller
passes ``now`` from its own clock, so tests of retry loops are deterministic and never wait.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BackoffPolicy:
    """Window lengths in seconds. The defaults are the API watches'; the kubelet client scales them."""

    initial_s: float = 1.0
    max_s: float = 60.0
    factor: float = 2.0
    retry_after_max_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s or self.factor < 1 or self.retry_after_max_s < 0:
            raise ValueError(f"invalid backoff policy {self}")

    def window(self, failures: int) -> float:
        """Length of window ``failures`` (1 = the window after the first failure)."""
        if failures < 1:
            raise ValueError("window numbers start at 1")
        length = self.initial_s
        for _ in range(failures - 1):
            length *= self.factor
            if length >= self.max_s:
                return self.max_s
        return min(length, self.max_s)

    def windows_until(self, duration_s: float) -> int:
        """How many windows start within ``duration_s`` of the first failure (windows back to back)."""
        count, elapsed = 0, 0.0
        while elapsed < duration_s:
            count += 1
            elapsed += self.window(count)
        return count

    def max_attempts(self, duration_s: float) -> int:
        """Most attempts one failure episode of ``duration_s`` seconds can make: the attempt that
        failed first, plus one retry per window that starts in the episode. Windows only ever start
        later than back to back (slow attempts, Retry-After), so this bounds every case."""
        return 1 + self.windows_until(duration_s)


class Backoff:
    """The window schedule of one retrying loop (see the module docstring). Thread-safe."""

    def __init__(self, policy: BackoffPolicy, random_fraction: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self._random = random_fraction
        self._lock = threading.Lock()
        self._failures = 0
        self._window_end: float | None = None
        self.window_start = 0.0  # of the current window, for tests and logs
        self.window_length = 0.0

    @property
    def failures(self) -> int:
        """Consecutive failures since the last ``reset``."""
        return self._failures

    def failed(self, now: float, retry_after_s: float | None = None) -> float:
        """Record a failed attempt that ended at ``now``; return the delay until the next attempt."""
        with self._lock:
            self._failures += 1
            length = self.policy.window(self._failures)
            start = now if self._window_end is None else max(now, self._window_end)
            if retry_after_s is not None and retry_after_s > 0:
                start = max(start, now + min(retry_after_s, self.policy.retry_after_max_s))
            self._window_end = start + length
            self.window_start, self.window_length = start, length
            return start + self._random() * length - now

    def reset(self) -> None:
        """The episode is over: the next failure opens window 1 again."""
        with self._lock:
            self._failures = 0
            self._window_end = None


def retry_after_seconds(value: Any) -> float | None:
    """A ``Retry-After`` header value in seconds, as ``Backoff.failed`` takes it: the one parser of the header.

    Servers we retry against (the API server, Prometheus behind a proxy) send whole seconds; None when
    the header is absent, an HTTP date, negative or not finite (the window then follows the policy alone).
    """
    if value is None:
        return None
    try:
        seconds = float(str(value).strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 and math.isfinite(seconds) else None
