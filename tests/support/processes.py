"""Programs a test starts: launch with a log file, wait until ready, read the log's tail, stop.

Prometheus, Alertmanager and each Thanos component are all the same shape: a binary started in a
throw-away directory, listening on a free loopback port, ready when ``/-/ready`` answers 200, logging
to a file whose tail explains a failure. ``ServerProcess`` is that shape once; the harnesses give it
their command line and add their own API.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.support.polling import DeadlineExceeded, wait_for


class ProcessExited(RuntimeError):
    """The program exited while the test waited for it to become ready (its log tail says why)."""


def stop_process(process: subprocess.Popen[bytes] | subprocess.Popen[str], grace_s: float = 10.0) -> int:
    """SIGTERM, then SIGKILL when it has not exited within ``grace_s``; the exit status.

    Why one helper: every harness (exporter, Prometheus, Alertmanager, remediator) must stop what it
    started even when the program ignores SIGTERM, or a failed test leaves processes behind.
    """
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    return process.returncode


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ("" when it does not exist yet)."""
    if not path.exists():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def answers_200(url: str) -> bool:
    """Whether GET ``url`` answers 200 now (a refused or slow connection is "not yet")."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


class ServerProcess:
    """``command`` run in ``workdir``, its output in ``log_path``, ready when ``ready_url`` answers 200.

    ``name`` is how failures call it ("prometheus", "thanos query"). ``launch`` starts it without
    waiting (several servers that must see the same events start together), ``wait_ready`` waits and
    stops it again when it never becomes ready or exits, so a failed start leaves nothing behind.
    """

    def __init__(self, name: str, command: Sequence[str], workdir: Path, ready_url: str,
                 log_path: Path | None = None) -> None:
        self.name = name
        self.command = list(command)
        self.workdir = workdir
        self.ready_url = ready_url
        self.log_path = log_path or workdir / f"{name.replace(' ', '-')}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def launch(self) -> ServerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        return self

    def wait_ready(self, deadline_s: float) -> ServerProcess:
        try:
            wait_for(self.ready, deadline_s, f"{self.name} to answer {self.ready_url}", interval_s=0.1)
        except DeadlineExceeded as error:
            tail = self.log_tail()
            self.stop()
            raise DeadlineExceeded(f"{error}; its log:\n{tail}") from None
        except ProcessExited:
            self.stop()
            raise
        return self

    def start(self, deadline_s: float) -> ServerProcess:
        return self.launch().wait_ready(deadline_s)

    def ready(self) -> bool:
        """Whether it answers ready now; ProcessExited (with the log's tail) once it has exited."""
        if self.process is None:
            raise ProcessExited(f"{self.name} was never started")
        if self.process.poll() is not None:
            raise ProcessExited(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
        return answers_200(self.ready_url)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None


class ScratchServer:
    """A harness whose program (``server``) runs in a directory made for it (``workdir``): ``stop`` stops
    the program and deletes the directory, and the harness is a context manager around ``start``,
    which each harness writes (its configuration, its command line)."""

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.server: ServerProcess | None = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running program (None before the start and after the stop)."""
        return self.server.process if self.server is not None else None

    def start(self) -> Self:
        raise NotImplementedError

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the program logged (for failure messages)."""
        return self.server.log_tail(lines) if self.server is not None else ""

    def stop(self) -> None:
        """Stop the program (SIGTERM, then SIGKILL after 10 s) and delete its directory."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
