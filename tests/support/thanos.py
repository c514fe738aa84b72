"""Thanos for the multi-cluster tests: a sidecar beside each Prometheus, one Query, one Ruler.

Every component is ``thanos <subcommand>`` from the one binary built from github.com/thanos-io/thanos
(``scripts/cluster bin thanos``, tools/platform/thanos), run as a process on loopback with its HTTP
and gRPC ports chosen here:

* :func:`start_sidecar` serves one Prometheus' data over the StoreAPI (it reads it through the
  Prometheus' remote-read API and adds the Prometheus' external labels; it refuses a Prometheus
  without external labels). No object storage: the query path needs none;
* :class:`ThanosQuery` fans a PromQL query out to the endpoints it is given and answers on the
  Prometheus HTTP API, so it has every query method of :class:`PrometheusHarness`;
* :func:`start_ruler` evaluates rule files by asking a Query, stores what it records in its own TSDB
  and serves it over the StoreAPI (a Query lists it as an endpoint).

"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import yaml

from devcluster import build
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.processes import ServerProcess
from tests.support.prometheus import PrometheusError, PrometheusHarness, Sample


def require_thanos() -> str:
    """The ``thanos`` executable from the platform cache.

    Missing locally: the calling test skips with how to build it. Under CI=true it is built now
    (``./scripts/test`` builds it before the suite; this only happens when that step was bypassed)
    and a failed build fails the test: CI must never pass without the multi-cluster proof.
    """
    path = build.binary_path("thanos")
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("thanos is not built: `scripts/cluster bin thanos` builds it (Go >= 1.26, minutes once; "
                    "./scripts/test does it)")
    try:
        return str(build.build("thanos"))
    except build.BuildError as error:
        pytest.fail(f"thanos could not be built; CI=true requires it: {error}", pytrace=False)


class ThanosProcess:
    """One ``thanos <component>`` process with an HTTP and a gRPC listener on 127.0.0.1."""

    def __init__(self, binary: str, component: str, args: Sequence[str], workdir: Path,
                 http_port: int | None = None, grpc_port: int | None = None) -> None:
        self.binary = binary
        self.component = component
        self.args = list(args)
        self.workdir = workdir
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.server = ServerProcess(
            f"thanos {component}",
            [binary, component, f"--http-address=127.0.0.1:{self.http_port}",
             f"--grpc-address=127.0.0.1:{self.grpc_port}", "--log.level=warn", *self.args],
            workdir, f"{self.url}/-/ready", workdir / f"thanos-{component}.log")

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.server.process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, deadline_s: float = 60.0) -> ThanosProcess:
        """Start the process and wait until ``/-/ready`` answers 200."""
        self.server.start(deadline_s)
        return self

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET ``path`` on the HTTP listener and return the JSON answer's ``data``."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=30) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise PrometheusError(f"{path}: {body}")
        return body["data"]

    def log_tail(self, lines: int = 40) -> str:
        return self.server.log_tail(lines)

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> ThanosProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def start_sidecar(binary: str, prometheus: PrometheusHarness, tsdb: Path, workdir: Path) -> ThanosProcess:
    """A sidecar serving ``prometheus`` (whose TSDB directory is ``tsdb``) over the StoreAPI."""
    return ThanosProcess(binary, "sidecar", [f"--prometheus.url={prometheus.url}", f"--tsdb.path={tsdb}"],
                         workdir).start()


def start_ruler(binary: str, query_url: str, rule_files: Sequence[Path], data_dir: Path, *,
                eval_interval: str, query_offset: str, labels: Mapping[str, str],
                grpc_port: int | None = None) -> ThanosProcess:
    """Thanos Ruler evaluating ``rule_files`` every ``eval_interval`` against the Query at ``query_url``.

    ``query_offset`` (``--rule-query-offset``) evaluates each group that much in the past, so that
    every sample the Query fans out for has been written; ``labels`` are the ruler's external labels
    (added to everything it records, as a Prometheus' external labels are by its sidecar).
    """
    args = [f"--data-dir={data_dir}", f"--eval-interval={eval_interval}", f"--rule-query-offset={query_offset}",
            f"--query={query_url}", *(f"--rule-file={path}" for path in rule_files),
            *(f'--label={name}="{value}"' for name, value in labels.items())]
    return ThanosProcess(binary, "rule", args, data_dir.parent / f"{data_dir.name}-process",
                         grpc_port=grpc_port).start()


class ThanosQuery(PrometheusHarness):
    """``thanos query`` in front of ``endpoints`` (gRPC addresses), queried like a Prometheus.

    ``replica_labels`` are deduplicated away (``--query.replica-label``): series that differ only by
    them are merged into one. :meth:`raw_query` asks without deduplication.
    """

    def __init__(self, binary: str, endpoints: Sequence[str], *, replica_labels: Sequence[str] = ()) -> None:
        super().__init__([])
        self.binary = binary
        self.endpoints = list(endpoints)
        self.replica_labels = list(replica_labels)
        self.thanos: ThanosProcess | None = None

    def start(self) -> ThanosQuery:
        self.workdir = Path(tempfile.mkdtemp(prefix="thanos-query-"))
        sd_config = yaml.safe_dump({"endpoints": [{"address": address} for address in self.endpoints]})
        args = [f"--endpoint.sd-config={sd_config}", "--endpoint.sd-config-reload-interval=1s",
                *(f"--query.replica-label={label}" for label in self.replica_labels)]
        self.thanos = ThanosProcess(self.binary, "query", args, self.workdir).start()
        self.server = self.thanos.server  # stopped, and its directory deleted, as a Prometheus' is
        self.port = self.thanos.http_port
        return self

    def stores(self) -> list[dict[str, Any]]:
        """The endpoints the Query holds (``/api/v1/stores``), each with its external label sets."""
        data = self.api("stores") or {}
        return [store for stores in data.values() for store in stores]

    def wait_for_endpoints(self, count: int, deadline_s: float = 60.0) -> list[dict[str, Any]]:
        """Wait until ``count`` endpoints are healthy (no lastError)."""
        stores = wait_for(self.stores, deadline_s, f"{count} healthy Thanos endpoints", 0.25,
                          accept=lambda stores: len([s for s in stores if not s.get("lastError")]) >= count)
        return [s for s in stores if not s.get("lastError")]

    def raw_query(self, expr: str, at: float | None = None) -> list[Sample]:
        """An instant query without deduplication: every replica's series with its replica label."""
        params = {"query": expr, "dedup": "false"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", params)
        if data["resultType"] != "vector":
            raise PrometheusError(f"unexpected result type {data['resultType']} for {expr}")
        return [Sample(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]

    def query_stores(self, expr: str, at: float, addresses: Sequence[str]) -> list[Sample]:
        """An instant query answered from the endpoints at ``addresses`` only (``storeMatch[]``)."""
        pattern = "|".join(address.replace(".", "\\\\.") for address in addresses)
        data = self.api("query", {"query": expr, "time": f"{at:.3f}", "storeMatch[]": f'{{__address__=~"{pattern}"}}'})
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        return [Sample(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]

    def raw_samples(self, expr: str, at: float,
                    dedup: bool = False) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """A range selector's raw samples at ``at`` (``expr`` must end in ``[duration]``): labels and
        (timestamp, value) pairs exactly as stored."""
        data = self.api("query", {"query": expr, "time": f"{at:.3f}", "dedup": str(dedup).lower()})
        if data["resultType"] != "matrix":
            raise PrometheusError(f"unexpected result type {data['resultType']} for {expr}")
        return [(dict(item["metric"]), [(float(t), float(v)) for t, v in item["values"]]) for item in data["result"]]
