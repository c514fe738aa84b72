"""A real Alertmanager (Debian's ``prometheus-alertmanager``, 0.25) for end-to-end tests, and a payload recorder.

``AlertmanagerHarness`` starts Alertmanager on a free port with a throw-away storage directory,
the given configuration and clustering off, and waits until ``/-/ready`` answers.
``PayloadRecorder`` is a webhook receiver that keeps every body Alertmanager posts, so a test can
look at exactly what was delivered and replay it.

A missing binary skips the calling test, or fails it when CI=true (``require_program``).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.support.ports import free_port
from tests.support.processes import ScratchServer, ServerProcess
from tests.support.programs import require_program

BINARY = "prometheus-alertmanager"


def require_alertmanager() -> str:
    return require_program(BINARY)


class AlertmanagerHarness(ScratchServer):
    def __init__(self, config: dict[str, Any], *, startup_timeout_s: float = 60.0, binary: str | None = None) -> None:
        self.config = config
        self.binary = binary  # None: Debian's prometheus-alertmanager; else e.g. scripts/cluster bin alertmanager
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        super().__init__()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> AlertmanagerHarness:
        binary = self.binary or require_alertmanager()
        self.workdir = Path(tempfile.mkdtemp(prefix="alertmanager-harness-"))
        config_path = self.workdir / "alertmanager.yml"
        config_path.write_text(yaml.safe_dump(self.config, sort_keys=False), encoding="utf-8")
        self.port = free_port()
        self.server = ServerProcess(
            "alertmanager",
            [binary, f"--config.file={config_path}", f"--storage.path={self.workdir / 'data'}",
             f"--web.listen-address={self.address}", "--cluster.listen-address=", "--log.level=warn"],
            self.workdir, f"{self.url}/-/ready")
        try:
            self.server.start(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self


    def alerts(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as response:
            return list(json.load(response))



class PayloadRecorder:
    """Answers 200 to every POST and keeps (receive time, raw body) in ``payloads``."""

    def __init__(self) -> None:
        self.payloads: list[tuple[float, bytes]] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with recorder._lock:
                    recorder.payloads.append((time.time(), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/alerts"

    def start(self) -> PayloadRecorder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def notifications(self) -> list[tuple[float, bytes, dict[str, Any]]]:
        with self._lock:
            return [(at, body, json.loads(body)) for at, body in self.payloads]
