"""Where ``top`` reads from: Prometheus (a cluster, or several through the ``cluster`` label) or
exporters' ``/metrics`` (one node each).

Both end in the node view of ``exporter.web.nodeview``, the same function that builds the node
page's ``/gpus.json``, so ``top`` and the page can never disagree about a GPU.

Prometheus costs **one instant query per refresh**: a single selector on ``__name__`` for the few
families the view needs (``QUERY_FAMILIES``), with the cluster and node filters pushed into it as
matchers, so the server touches only the series that will be shown. ``PrometheusSource.queries``
counts the requests (docs/top.md quotes it). An exporter costs one ``GET /metrics`` per refresh, the
same request a scrape makes: it is served from the exporter's cache.

A source that cannot be read does not stop the others: its failure is returned as a ``SourceError``
whose message the UI shows on its own line.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import urllib3
from prometheus_client.parser import text_string_to_metric_families

from exporter.conditions import FAMILIES as CONDITION_FAMILIES
from exporter.prometheus.client import (
    TLS_HINT,
    Connection,
    PrometheusClient,
    PrometheusError,
    http_pool,
    request_headers,
    split_url,
)
from exporter.prometheus.promql import any_of, quote
from exporter.top.model import NodeView
from exporter.web.nodeview import Sample, build_view

QUERY_FAMILIES = tuple(sorted({
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_EXP_GPU_HEALTHY", "DCGM_EXP_GPU_FB_TOTAL",
    "DCGM_EXP_GPU_ALLOCATED", "DCGM_EXP_GPU_ALLOCATION_INFO", "DCGM_EXP_CONTAINER_SM_UTIL",
    "DCGM_EXP_CONTAINER_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu_pod_exporter_device_up", *CONDITION_FAMILIES}))


@dataclass(frozen=True)
class SourceError:
    source: str
    message: str


@dataclass
class Reading:
    """One refresh: the nodes read and the sources that failed."""

    nodes: list[NodeView] = field(default_factory=list)
    errors: list[SourceError] = field(default_factory=list)
    prometheus_queries: int = 0  # what this refresh cost its sources
    metrics_reads: int = 0

    def cost(self) -> str:
        """The load this refresh put on its sources, for the title bar."""
        if self.prometheus_queries:
            return f"{self.prometheus_queries} Prometheus {'query' if self.prometheus_queries == 1 else 'queries'}"
        return f"{self.metrics_reads} /metrics {'read' if self.metrics_reads == 1 else 'reads'}"


# Targets that served GPU series within this window and now fail their scrapes are reported as down.
DOWN_LOOKBACK = "1h"


def selector(cluster: str = "", node: str = "") -> str:
    """The one PromQL query a refresh asks: the view's families, with the cluster and node filters
    pushed down as matchers, ``or`` the ``up`` series (value 0) of every exporter target that served
    GPU series in the last ``DOWN_LOOKBACK`` and now fails its scrapes (its GPU series went stale)."""
    matchers = [f"__name__=~{any_of(QUERY_FAMILIES)}"]
    scope = []
    if cluster:
        matchers.append(f"cluster={quote(cluster)}")
        scope.append(f"cluster={quote(cluster)}")
    if node:
        matchers.append(f"Hostname={quote(node)}")
    def with_matchers(name: str, terms: list[str]) -> str:
        return name + ("{" + ", ".join(terms) + "}" if terms else "")

    gpus = with_matchers("DCGM_FI_DEV_GPU_UTIL", matchers[1:])
    down = (f"{with_matchers('up', scope)} == 0 and on (cluster, job, instance) "
            f"group by (cluster, job, instance) (last_over_time({gpus}[{DOWN_LOOKBACK}]))")
    return "{" + ", ".join(matchers) + "} or (" + down + ")"


def group_nodes(samples: Iterable[tuple[str, Mapping[str, str], float]], *, by: str | None = None,
                default_cluster: str = "", default_node: str = "") -> list[NodeView]:
    """Split samples into nodes and build each node's view.

    ``by``: the label that tells one exporter's series from another's (Prometheus' ``instance``: every
    series of a target has it, while ``Hostname`` is missing on the exporter's own gauges); None when
    all samples come from one exporter. A node is shown by its ``Hostname`` when it has one, else by
    that label, else by ``default_node`` (an exporter's host:port): never blank, so its lines say where,
    and two such nodes are not one.
    """
    grouped: dict[tuple[str, str], list[Sample]] = {}
    for name, labels, value in samples:
        key = (labels.get("cluster", default_cluster), labels.get(by, "") if by else "")
        grouped.setdefault(key, []).append((name, labels, value))
    nodes = []
    for (cluster, target), items in sorted(grouped.items()):
        view = build_view(items)
        nodes.append(NodeView(cluster, str(view.get("node") or target or default_node), view))
    return nodes


class PrometheusSource:
    """A Prometheus-compatible API (Prometheus, Thanos Query, Mimir) through the one Prometheus client."""

    def __init__(self, connection: Connection, *, clock: Callable[[], float] = time.time) -> None:
        self.client = PrometheusClient(connection)
        self.name = self.client.base_url  # never the credentials of a user:password@ URL
        self._clock = clock
        self.queries = 0

    def read(self, cluster: str = "", node: str = "") -> Reading:
        now = self._clock()
        expr = selector(cluster, node)
        self.queries += 1
        try:
            series = self.client.query_range(expr, now, now, 1.0)  # one point: an instant query
        except PrometheusError as error:
            return Reading(errors=[SourceError(self.name, str(error))], prometheus_queries=1)
        samples = []
        errors = []
        for item in series:
            if not item.points:
                continue
            labels = dict(item.labels)
            name = labels.pop("__name__", "")
            if name in ("up", ""):  # `up == 0`: an exporter target Prometheus cannot scrape (name kept or not)
                where = "/".join(part for part in (labels.get("cluster", ""), labels.get("instance", "")) if part)
                why = (f"Prometheus cannot scrape it (up == 0, job {labels.get('job', '?')}): "
                       "no current data of its GPUs")
                errors.append(SourceError(f"exporter {where}", why))
                continue
            samples.append((name, labels, item.points[-1][1]))
        return Reading(nodes=group_nodes(samples, by="instance"), errors=errors, prometheus_queries=1)


class ExporterSource:
    """One exporter's ``/metrics`` (one node), parsed with prometheus_client's parser.

    Reached with the ``Connection``'s TLS and credentials, as the Prometheus client reaches Prometheus
    (``http_pool``, ``request_headers``): basic auth (or ``user:password@`` in the URL), a bearer token,
    a CA file or no verification, what the exporter's ``--web-config-file`` asks of a scraper.
    """

    def __init__(self, connection: Connection, *, cluster: str = "", pool: urllib3.PoolManager | None = None) -> None:
        base, url_credentials = split_url(connection.url)
        self.name = base if base.endswith("/metrics") else base + "/metrics"  # no credentials: it is shown
        self.address = urllib.parse.urlsplit(base).netloc  # the node's name when its series carry none
        self.cluster = cluster
        self._timeout = urllib3.Timeout(total=connection.timeout_s)
        self._headers = {**request_headers(connection, url_credentials), "Accept": "text/plain"}
        self._pool = pool or http_pool(connection)
        self._auth_hint = connection.auth_hint
        self.requests = 0

    def read(self, cluster: str = "", node: str = "") -> Reading:
        self.requests += 1
        try:
            response = self._pool.request("GET", self.name, headers=self._headers, timeout=self._timeout,
                                          retries=False)
        except urllib3.exceptions.SSLError as error:
            reason = getattr(error, "reason", None) or error
            return Reading(errors=[SourceError(self.name, f"TLS error: {reason} ({TLS_HINT})")], metrics_reads=1)
        except urllib3.exceptions.HTTPError as error:
            reason = getattr(error, "reason", None) or error
            return Reading(errors=[SourceError(self.name, f"cannot reach the exporter: {reason}")], metrics_reads=1)
        if response.status in (401, 403):
            message = f"HTTP {response.status} from the exporter: {self._auth_hint}"
            return Reading(errors=[SourceError(self.name, message)], metrics_reads=1)
        if response.status != 200:
            return Reading(errors=[SourceError(self.name, f"HTTP {response.status} from the exporter")],
                           metrics_reads=1)
        try:
            samples = list(parse_metrics(response.data.decode("utf-8", "replace")))
        except ValueError as error:
            return Reading(errors=[SourceError(self.name, f"cannot parse /metrics: {error}")], metrics_reads=1)
        nodes = [view for view in group_nodes(samples, default_cluster=self.cluster, default_node=self.address)
                 if (not cluster or view.cluster == cluster) and (not node or view.node == node)]
        return Reading(nodes=nodes, metrics_reads=1)


def parse_metrics(text: str) -> Iterable[tuple[str, Mapping[str, str], float]]:
    """(name, labels, value) of each sample, names as exported (dcgm-exporter's counters lack ``_total``,
    which the parser would add to typed counters: TYPE lines are dropped, as Prometheus keeps names)."""
    untyped = "\n".join(line for line in text.split("\n") if not line.startswith("# TYPE "))
    for family in text_string_to_metric_families(untyped + "\n"):
        for sample in family.samples:
            yield sample.name, sample.labels, sample.value


def read_all(sources: Sequence[PrometheusSource | ExporterSource], cluster: str = "", node: str = "") -> Reading:
    total = Reading()
    for source in sources:
        reading = source.read(cluster, node)
        total.nodes.extend(reading.nodes)
        total.errors.extend(reading.errors)
        total.prometheus_queries += reading.prometheus_queries
        total.metrics_reads += reading.metrics_reads
    return total
