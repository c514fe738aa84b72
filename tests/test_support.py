"""tests/support's primitives: a wait ends at the state or fails with what it last saw; a started program
that exits or never becomes ready fails the wait with its log and is not left behind."""

from __future__ import annotations

import itertools
import socket
import sys
from pathlib import Path

import pytest

from tests.support.polling import DeadlineExceeded, is_answer, settle, wait_for
from tests.support.ports import free_port
from tests.support.processes import ProcessExited, ServerProcess


def test_a_wait_returns_the_answer_that_holds() -> None:
    calls = itertools.count(1)
    assert wait_for(lambda: next(calls), 30.0, "the third call", 0.0, accept=lambda n: n >= 3) == 3


def test_a_state_already_reached_never_fails_even_past_the_deadline() -> None:
    assert wait_for(lambda: "ready", 0.0, "anything") == "ready"


def test_a_wait_that_runs_out_names_what_it_waited_for_and_the_last_answer() -> None:
    with pytest.raises(DeadlineExceeded, match=r"waiting for the pods list \(last: \[\]\)") as caught:
        wait_for(lambda: [], 0.0, "the pods list")
    assert isinstance(caught.value, AssertionError) and isinstance(caught.value, TimeoutError)


def test_an_empty_answer_can_be_the_awaited_one() -> None:
    assert wait_for(lambda: [], 0.0, "an answer", accept=is_answer) == []


def test_settle_returns_the_last_answer_either_way() -> None:
    assert settle(lambda: 5, 0.0, accept=lambda n: n > 9) == 5


def server(tmp_path: Path, code: str) -> ServerProcess:
    port = free_port()
    return ServerProcess("stand-in", [sys.executable, "-c", code], tmp_path, f"http://127.0.0.1:{port}/-/ready")


def test_a_program_that_exits_fails_the_wait_with_its_log(tmp_path: Path) -> None:
    program = server(tmp_path, "import sys; print('bad flag --x', flush=True); sys.exit(3)")
    with pytest.raises(ProcessExited, match=r"(?s)stand-in exited with 3:.*bad flag --x"):
        program.start(60.0)
    assert program.process is None


def test_a_program_that_never_becomes_ready_is_stopped(tmp_path: Path) -> None:
    program = server(tmp_path, "import time; print('listening nowhere', flush=True); time.sleep(600)")
    with pytest.raises(DeadlineExceeded, match=r"stand-in to answer"):
        program.start(0.5)
    assert program.process is None


def test_a_free_port_is_free() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
