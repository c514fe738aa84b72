"""Long-lived threads that come back after a bug, and say so while they are down.

Every source of the exporter runs on its own thread (sampler, event watcher, kubelet poller, API
watches, renderer, web-config reload checker, ...). Each loop handles the failures it expects
(NVML errors, a kubelet that is gone, a 410 from the API server); anything else is a bug, and
before this module it ended the thread silently while ``/health`` kept answering 200 "OK" (a
collect interval too large for ``Event.wait`` killed the sampler after its first cycle).

``supervised(target, name=..., stop=...)`` returns a thread that runs ``target`` under a
supervisor: an unexpected exception is logged (with its traceback: it is a bug, not a user
mistake), the thread counts as *down* (``/health`` answers 503 naming it), and ``target`` is run
again after the package's backoff (``exporter.backoff``: windows of 0.5 s doubling to 30 s, one
restart at a random moment in each; back to the first window once a run has lasted a minute).
Each restart is counted in ``gpu_pod_exporter_thread_restarts_total{thread}``.
A target that returns, or fails while its ``stop`` event is set, is finished, not restarted.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.backoff import Backoff, BackoffPolicy
from exporter.logs import get_logger

log = get_logger("supervisor")

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0


@dataclass(frozen=True)
class DownThread:
    name: str
    error: str
    since: float


class Supervisor:
    """Which supervised threads exist, how often each was restarted, and which are down now."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 backoff_initial_s: float = BACKOFF_INITIAL_S, backoff_max_s: float = BACKOFF_MAX_S,
                 random_fraction: Callable[[], float] = random.random) -> None:
        self._clock = clock
        self.policy = BackoffPolicy(initial_s=backoff_initial_s, max_s=backoff_max_s)
        self._random = random_fraction
        self._lock = threading.Lock()
        self._restarts: dict[str, int] = {}
        self._down: dict[str, DownThread] = {}

    def restarts(self) -> dict[str, int]:
        """Restarts per thread name, every supervised thread started so far included (0 if never)."""
        with self._lock:
            return dict(self._restarts)

    def down(self) -> list[DownThread]:
        with self._lock:
            return sorted(self._down.values(), key=lambda item: item.name)

    def run(self, name: str, target: Callable[[], None], stop: threading.Event | None) -> None:
        """Run ``target`` until it returns; restart it with backoff after an unexpected exception."""
        with self._lock:
            self._restarts.setdefault(name, 0)
        backoff = Backoff(self.policy, self._random)
        while True:
            started = self._clock()
            try:
                target()
            except Exception as exc:
                if stop is not None and stop.is_set():
                    self._up(name)
                    return  # failing on the way out is not worth a restart
                if self._clock() - started >= STABLE_AFTER_S:
                    backoff.reset()
                delay = backoff.failed(self._clock())
                failures = backoff.failures
                error = f"{type(exc).__name__}: {exc}"[:300]
                with self._lock:
                    self._down[name] = DownThread(name, error, self._clock())
                log.error("thread failed; restarting it", exc_info=failures == 1,  # noqa: TRY400 - once per episode
                          extra={"fields": {"thread": name, "error": error, "restart_in_s": round(delay, 2),
                                            "failures_in_a_row": failures}})
                if stop is not None:
                    if stop.wait(delay):
                        self._up(name)
                        return
                else:
                    time.sleep(delay)
                with self._lock:
                    self._restarts[name] = self._restarts.get(name, 0) + 1
                    self._down.pop(name, None)
                log.info("thread restarted", extra={"fields": {"thread": name}})
                continue
            self._up(name)
            return

    def _up(self, name: str) -> None:
        with self._lock:
            self._down.pop(name, None)


SUPERVISOR = Supervisor()


def supervised(target: Callable[[], None], *, name: str, stop: threading.Event | None = None,
               supervisor: Supervisor | None = None) -> threading.Thread:
    """A daemon thread (not started) that runs ``target`` under ``supervisor`` (the process's by default)."""
    owner = supervisor or SUPERVISOR
    return threading.Thread(target=owner.run, args=(name, target, stop), name=name, daemon=True)

