"""Run one probe with a deadline, so a hung driver call or a silent socket cannot hang the doctor.

NVML calls cannot be interrupted, and a kubelet or API server may accept a connection and never
answer. Each probe runs on its own daemon thread; when the deadline passes the doctor reports the
hang and moves on (the thread is abandoned: the process exits when the doctor is done). Under
``--simulate`` the simulated hang is released at the end and ``join_abandoned`` lets those threads
finish before the fake library is detached, so nothing of one run reaches the next one's fake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

_abandoned: list[threading.Thread] = []
_abandoned_lock = threading.Lock()


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """``finished`` False: still running at the deadline. Otherwise ``value`` or ``error`` is set."""

    finished: bool
    value: T | None = None
    error: BaseException | None = None


def run_with_deadline(function: Callable[[], T], timeout_s: float, name: str = "doctor-probe") -> Outcome[T]:
    result: list[Outcome[T]] = []

    def target() -> None:
        try:
            result.append(Outcome(True, value=function()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which decides
            result.append(Outcome(True, error=exc))

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if result:
        return result[0]
    with _abandoned_lock:
        _abandoned.append(thread)
    return Outcome(False)


def join_abandoned(timeout_s: float) -> None:
    """Wait (at most ``timeout_s`` in all) for probe threads left behind at their deadline to end."""
    with _abandoned_lock:
        threads, _abandoned[:] = list(_abandoned), []
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
