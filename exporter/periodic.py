"""A background thread that runs one step after another, each after the delay the previous one chose.

Sources that re-read something on their own clock (the ``-m`` ConfigMap, the HPC job mapping
directory) share this instead of each owning a start/stop/loop: the step decides how long to wait
(its interval, or a backoff after a failure), ``stop`` ends the wait at once, and an exception in a
step is logged and does not end the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from exporter.logs import get_logger
from exporter.supervisor import supervised

LOG = get_logger("periodic")


class Periodic:
    """Calls ``step()`` after ``first_delay_s``, then after whatever delay each call returns."""

    def __init__(self, name: str, step: Callable[[], float], first_delay_s: float) -> None:
        self.name = name
        self._step = step
        self._first_delay_s = first_delay_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = supervised(self._run, name=self.name, stop=self._stop)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        delay = self._first_delay_s
        while not self._stop.wait(delay):
            try:
                delay = self._step()
            except Exception:  # a bug in one step must not end the source for good
                LOG.exception("%s: a background step failed; trying again", self.name)
                delay = self._first_delay_s
