"""Start the real exporter as a separate process for end-to-end tests, and talk to it over HTTP.

Every whole-process test (the simulator demo, attribution, faults, Prometheus) uses this one helper,
so they all exercise the same entry point a user runs: ``python -m exporter ...``.
"""

from __future__ import annotations

import gzip
import http.client
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.processes import stop_process


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample, with names exactly as Prometheus stores them.

    prometheus-client's parser appends ``_total`` to the samples of any ``counter`` family; Prometheus
    does not, and dcgm-exporter's counters have no such suffix. Without the TYPE lines every family is
    untyped and the library's parser (which does the label unescaping) keeps names as written.
    Lines are split at "\n" only: a label value may hold a raw carriage return or other characters
    that ``str.splitlines`` would also break at.
    """
    untyped = "\n".join(line for line in text.split("\n") if not line.startswith("# TYPE "))
    return [(sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(untyped + "\n") for sample in family.samples]


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


class ExporterProcess:
    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None,
                 wrapper: Sequence[str] = (), inherit_environment: bool = True, port: int | None = None) -> None:
        """``wrapper`` runs before the interpreter, e.g. ``setpriv --reuid ...`` to drop privileges.

        ``inherit_environment=False``: the process gets ``env`` and nothing of the test's environment.
        ``port``: listen there (a scrape configuration written before the start names it); default a free one.
        """
        self.port = port or free_port()
        self.args = ["--address", f"127.0.0.1:{self.port}", *args]
        environ = {**(os.environ if inherit_environment else {}), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu-pod-exporter-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "exporter", *self.args], cwd=cwd or REPO_ROOT, env=environ,
            stdout=self._log, stderr=subprocess.STDOUT)

    def get(self, path: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> Response:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            body = response.read()
            if response.getheader("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            return Response(response.status, dict(response.getheaders()), body)
        finally:
            conn.close()

    def try_get(self, path: str) -> Response | None:
        try:
            return self.get(path, timeout=2.0)
        except OSError:
            return None

    def wait_healthy(self, deadline_s: float = 20.0) -> Response:
        def healthy() -> Response | None:
            self.assert_running()
            response = self.try_get("/health")
            return response if response is not None and response.status == 200 else None

        return wait_for(healthy, deadline_s, "/health to answer 200")

    def wait_listening(self, deadline_s: float = 20.0) -> Response:
        def listening() -> Response | None:
            self.assert_running()
            return self.try_get("/health")

        return wait_for(listening, deadline_s, "the HTTP listener")

    def metrics(self) -> str:
        response = self.get("/metrics")
        assert response.status == 200, response.text
        return response.text

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(labels, value) for sample_name, labels, value in parse_samples(self.metrics()) if sample_name == name]

    def assert_running(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise AssertionError(f"exporter exited with {code}; log:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        code = stop_process(self.process)
        self._log.close()
        return code


def series(exporter: ExporterProcess, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """Samples of ``name`` keyed by the values of ``keys`` (counter samples may carry a parser-added _total)."""
    found: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(exporter.metrics()):
        for sample in family.samples:
            if sample.name in (name, f"{name}_total"):
                found[tuple(sample.labels.get(key, "") for key in keys)] = sample.value
    return found


@contextmanager
def running_exporter(args: Sequence[str], env: dict[str, str] | None = None,
                     wrapper: Sequence[str] = ()) -> Iterator[ExporterProcess]:
    exporter = ExporterProcess(args, env, wrapper=wrapper)
    try:
        yield exporter
    finally:
        exporter.stop()
