"""Drive a terminal program in a private tmux server, as a user at a keyboard would.

Each ``Pane`` has its own tmux server socket (``-L``), so tests never touch a user's tmux and never
see each other's panes; ``close`` kills that server and everything in it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid
from collections.abc import Callable, Sequence

from tests.support.polling import settle
from tests.support.programs import require_program


class Pane:
    def __init__(self, command: Sequence[str], *, width: int = 170, height: int = 30,
                 env: dict[str, str] | None = None) -> None:
        self.tmux = require_program("tmux", "tmux")
        self.socket = f"gpe-test-{uuid.uuid4().hex[:10]}"
        environment = " ".join(f"{key}={shlex.quote(value)}" for key, value in (env or {}).items())
        line = f"env {environment} {shlex.join(command)}; echo EXITED $?; sleep 600"
        self._run("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), line)

    def _run(self, *args: str) -> str:
        result = subprocess.run([self.tmux, "-L", self.socket, "-f", os.devnull, *args], capture_output=True,
                                text=True, timeout=30, check=True)
        return result.stdout

    def send(self, *keys: str) -> None:
        """tmux key names ("Tab", "Down", "Enter", "Escape", "C-u") or literal text."""
        self._run("send-keys", "-t", "t", *keys)

    def capture(self, escapes: bool = False) -> str:
        return self._run("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "t")

    def wait_for(self, check: Callable[[str], bool], deadline_s: float, what: str, escapes: bool = False) -> str:
        screen = settle(lambda: self.capture(escapes), deadline_s, 0.2, accept=check)
        assert check(screen), f"timed out after {deadline_s} s waiting for {what}; the screen:\n{screen}"
        return screen

    def close(self) -> None:
        subprocess.run([self.tmux, "-L", self.socket, "kill-server"], capture_output=True, timeout=30, check=False)
