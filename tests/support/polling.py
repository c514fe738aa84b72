"""Wait for a state, never for time to pass: poll a check until it holds or a deadline passes.

Why one function: the suite waited in seven helpers and twenty inline loops, each with its own idea
of the deadline, the interval and the failure message. A test that waits for a state passes on a
loaded machine as soon as the state is reached, and fails with what it last saw when it never is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class DeadlineExceeded(AssertionError, TimeoutError):
    """The awaited state did not come in time.

    Both an AssertionError (pytest reports it as a failed expectation) and a TimeoutError (callers that
    treat a slow start as a timeout, like a harness stopping the process it started, catch it as one).
    """


def holds(value: object) -> bool:
    """The default acceptance: a truthy answer (True, a non-empty list, a response object)."""
    return bool(value)


def is_answer(value: object) -> bool:
    """Acceptance for checks whose falsy answers are meaningful (an empty result): anything but None."""
    return value is not None


def settle(check: Callable[[], T], deadline_s: float, interval_s: float = 0.05,
           accept: Callable[[T], bool] = holds) -> T:
    """Call ``check`` until ``accept(answer)`` holds or the deadline passes; the last answer either way.

    For a caller that asserts on the answer itself with a better message than "timed out" (the
    differing series, the screen, the alerts missing). ``check`` is called at least once.
    """
    end = time.monotonic() + deadline_s
    while True:
        answer = check()
        if accept(answer) or time.monotonic() >= end:
            return answer
        time.sleep(interval_s)


def wait_for(check: Callable[[], T], deadline_s: float, what: str, interval_s: float = 0.05,
             accept: Callable[[T], bool] = holds) -> T:
    """Call ``check`` until ``accept(answer)`` holds and return that answer; DeadlineExceeded otherwise.

    ``check`` is called at least once, even with a deadline already past, so a state already reached
    never fails. Exceptions from ``check`` propagate (a process that died is not worth waiting for).
    The failure names ``what`` and the last answer.
    """
    answer = settle(check, deadline_s, interval_s, accept)
    if not accept(answer):
        raise DeadlineExceeded(f"timed out after {deadline_s:g} s waiting for {what} (last: {answer!r})")
    return answer
