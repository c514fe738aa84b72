"""The supervisor on its own: restart with backoff after a bug, count, report down; finish on return or stop."""

from __future__ import annotations

import threading

from exporter.supervisor import Supervisor, supervised
from tests.support.polling import wait_for


def test_a_failing_target_is_restarted_until_it_returns_and_each_restart_is_counted() -> None:
    supervisor = Supervisor(backoff_initial_s=0.01, backoff_max_s=0.05)
    runs = []

    def target() -> None:
        runs.append(1)
        if len(runs) <= 3:
            raise ValueError("bug")

    thread = supervised(target, name="worker", supervisor=supervisor)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and len(runs) == 4
    assert supervisor.restarts() == {"worker": 3} and supervisor.down() == []


def test_while_backing_off_the_thread_is_down_with_its_error_and_stop_ends_it() -> None:
    supervisor = Supervisor(backoff_initial_s=30.0, random_fraction=lambda: 0.5)  # restart in 15 s: after the test
    stop = threading.Event()

    def target() -> None:
        raise KeyError("missing")

    thread = supervised(target, name="worker", stop=stop, supervisor=supervisor)
    thread.start()
    [down] = wait_for(supervisor.down, 10, "the thread to be reported down")
    assert down.name == "worker" and "KeyError" in down.error
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and supervisor.down() == [] and supervisor.restarts() == {"worker": 0}
