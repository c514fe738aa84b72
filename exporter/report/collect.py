"""The queries the report sends, and the fetched series they return.

Every query reads the recorded series of ``sources`` and is evaluated at the window's points
(``start + step`` ... ``end``): each point stands for the ``step`` seconds before it, like the
``sum_over_time(...[30d:5m]) / 12`` bill queries of docs/cost.md. Results are summed by
``cluster, namespace, team, modelName`` (the bill) or ``cluster, namespace, pod, team`` (the
pods), so a fleet of clusters in one Thanos or Mimir comes back per cluster.

The idle threshold is the report's own (``--idle-threshold``), so idle time is computed here
from the per-holder series (fraction held ``and`` utilisation below the threshold) rather than
recorded with a fixed threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.prometheus.client import PrometheusClient, Series
from exporter.prometheus.promql import any_of, quote
from exporter.report.model import Window
from exporter.report.sources import (
    ALLOCATION_INPUTS,
    BUSY,
    CAPACITY,
    CLUSTER_LABEL,
    ENERGY,
    FRACTION,
    HOLDER_FRACTION,
    HOLDER_UTILIZATION,
    MEASURED,
    MEASURED_USE_SHARE,
    MEMORY,
    SOURCES,
    UTILIZATION_INPUTS,
    Presence,
    Source,
)

GROUP_BY = "cluster, namespace, team, modelName"
POD_BY = "cluster, namespace, pod, team"


@dataclass(frozen=True)
class Fetched:
    """Everything the arithmetic needs, as the server returned it."""

    window: Window
    presence: Presence
    groups: dict[str, list[Series]]
    pods: dict[str, list[Series]]
    capacity: list[Series]
    warnings: tuple[str, ...]


def cluster_matcher(clusters: Sequence[str]) -> str:
    """A label matcher restricting every query to ``clusters`` (empty: no restriction)."""
    if not clusters:
        return ""
    if len(clusters) == 1:
        return f"{CLUSTER_LABEL}={quote(clusters[0])}"
    return f"{CLUSTER_LABEL}=~{any_of(clusters)}"


class Queries:
    """The PromQL of each part of the report, restricted by ``matcher``."""

    def __init__(self, matcher: str, idle_threshold_percent: float) -> None:
        self.matcher = matcher
        self.threshold = f"{idle_threshold_percent:g}"

    def select(self, source: Source | str) -> str:
        name = source.series if isinstance(source, Source) else source
        return f"{name}{{{self.matcher}}}" if self.matcher else name

    def idle_holders(self) -> str:
        return f"{self.select(HOLDER_FRACTION)} and ({self.select(HOLDER_UTILIZATION)} < {self.threshold})"

    def groups(self) -> dict[str, str]:
        queries = {source.key: f"sum by ({GROUP_BY}) ({self.select(source)})"
                   for source in (FRACTION, BUSY, MEASURED, MEMORY, ENERGY)}
        queries["idle"] = f"sum by ({GROUP_BY}) ({self.idle_holders()})"
        return queries

    def pods(self) -> dict[str, str]:
        fraction, utilization = self.select(HOLDER_FRACTION), self.select(HOLDER_UTILIZATION)
        return {
            "fraction": f"sum by ({POD_BY}) ({fraction})",
            "busy": f"sum by ({POD_BY}) ({fraction} * {utilization} / 100)",
            "measured": f"sum by ({POD_BY}) ({fraction} and {utilization})",
            "idle": f"sum by ({POD_BY}) ({self.idle_holders()})",
        }

    def capacity(self) -> str:
        return f"sum by ({CLUSTER_LABEL}) ({self.select(CAPACITY)})"


def presence(client: PrometheusClient, queries: Queries, window: Window) -> Presence:
    """Which clusters have each series the report reads, or that those series are computed from."""
    names = sorted({*(s.series for s in SOURCES), *ALLOCATION_INPUTS, *UTILIZATION_INPUTS, MEASURED_USE_SHARE,
                    *(name for s in SOURCES for name in s.inputs)})
    present = set(client.label_values("__name__", [queries.select(name) for name in names],
                                      window.start, window.end))
    clusters: dict[str, frozenset[str]] = {}
    for name in names:
        if name not in present:
            clusters[name] = frozenset()
            continue
        values = client.label_values(CLUSTER_LABEL, [queries.select(name)], window.start, window.end)
        clusters[name] = frozenset(values) if values else frozenset({""})
    return Presence(clusters)


def fetch(client: PrometheusClient, queries: Queries, window: Window) -> Fetched:
    """Run every query of the report over the window (chunked by the client)."""
    found = presence(client, queries, window)
    first, last = window.start + window.step, window.end

    def run(expr: str) -> list[Series]:
        return client.query_range(expr, first, last, window.step)

    groups = {key: run(expr) for key, expr in queries.groups().items()}
    pods = {key: run(expr) for key, expr in queries.pods().items()}
    capacity = run(queries.capacity())
    return Fetched(window, found, groups, pods, capacity, tuple(client.warnings))
