"""Two clusters behind Thanos, as docs/fleet.md draws them: what tests/e2e/test_two_clusters.py and
``python -m bench.thanos`` start.

* cluster ``a`` and cluster ``b``: each runs the chart-installed exporter (default values, process
  attribution on) on the same simulated node (the built-in ``alert-zoo``: Hostname ``zoo-node``, the
  same GPU UUIDs, pods and teams) and a kube-state-metrics stand-in, scraped every second by its own
  Prometheus 3 whose only mark of its cluster is the external label ``cluster``, loading the chart's
  rule groups, with a Thanos sidecar;
* one Thanos Query in front of both sidecars and the ruler, deduplicating on ``rule_replica``;
* one Thanos Ruler evaluating the chart's recording groups (all four) once for the fleet, through
  the Query, with its external label ``rule_replica="fleet"``.

The ruler and the clusters evaluate the recording groups at the same instants (``align_evaluations``)
and read the same scrapes: each evaluates far enough in the past that every scrape it reads is written
(``query_offset``: 2 to 3 s in the clusters, more than the 1 s scrape timeout; 10 s in the ruler, so
that the clusters' own recordings of the same instant exist when it reads them).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.e2e.installed import helm_install
from tests.e2e.test_default_install import KUBE_STATE_METRICS, PROCESS_ATTRIBUTION, ZOO, serve_text, start_exporter
from tests.support.exporter_process import ExporterProcess
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.prometheus import PrometheusHarness, engine_version
from tests.support.thanos import ThanosProcess, ThanosQuery, start_ruler, start_sidecar

T = TypeVar("T")
CLUSTERS = ("a", "b")
ALLOCATION = {"research": 5.0, "vision": 3.0, "serving": 2 / 3, "search": 1 / 3}  # the zoo's, per cluster
ZOO_NODE = ZOO.hostname
INTERVAL_S = 1  # scrape, rule evaluation (clusters and ruler)
CLUSTER_QUERY_OFFSET_S = 2  # > the scrape timeout (1 s): every scrape a cluster's rules read is written
RULER_QUERY_OFFSET_S = 10  # the ruler reads what the clusters recorded 7 s before (their twins exist)
RULER_LABELS = {"rule_replica": "fleet"}
REL = 1e-9  # two PromQL engines may add the same numbers in another order


class ClusterPrometheus(PrometheusHarness):
    """A cluster's Prometheus: its exporter and kube-state-metrics, ``cluster`` only as external label."""

    def __init__(self, cluster: str, exporters: Sequence[str], kube_state_metrics: str, **kwargs: Any) -> None:
        super().__init__(exporters, extra_jobs={"kube-state-metrics": [kube_state_metrics]},
                         scrape_interval=f"{INTERVAL_S}s", evaluation_interval=f"{INTERVAL_S}s",
                         # the sidecar's requirement when it uploads blocks; kept as users must run it
                         extra_flags=["--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h"],
                         **kwargs)
        self.cluster = cluster

    def config(self) -> dict[str, Any]:
        config = super().config()
        config["global"]["external_labels"] = {"cluster": self.cluster}
        config["global"]["rule_query_offset"] = f"{CLUSTER_QUERY_OFFSET_S}s"
        return config

    @property
    def tsdb(self) -> Path:
        assert self.workdir is not None, "not started"
        return self.workdir / "data"


@dataclass
class Fleet:
    clusters: dict[str, ClusterPrometheus]
    exporters: dict[str, ExporterProcess]
    query: ThanosQuery
    ruler: ThanosProcess
    sidecars: dict[str, ThanosProcess]
    recording_groups: list[dict[str, Any]]
    thanos_version: str
    prometheus_version: str


@contextmanager
def two_clusters(prometheus: str, thanos: str, workdir: Path) -> Iterator[Fleet]:
    """The whole fleet of the module docstring, started in order and ready: both clusters scraped and
    their rules evaluated, the ruler's first evaluations visible through the Query. Stopped on exit."""
    install = helm_install(PROCESS_ATTRIBUTION)
    recording = [g for g in install.rule_groups if all("record" in rule for rule in g["rules"])]
    alerting = [g for g in install.rule_groups if g not in recording]
    assert len(recording) >= 4 and alerting
    # The ruler and the clusters read the same groups from files of their own (the clusters' gets each
    # group's query_offset once the instants are known: align_evaluations).
    source = workdir / "rules" / "recording.yaml"
    ruler_data = workdir / "ruler"
    cluster_recording = workdir / "rules" / "cluster-recording.yaml"
    for path in (source, cluster_recording):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"groups": recording}, sort_keys=False), encoding="utf-8")
    alerts = workdir / "rules" / "alerts.yaml"
    alerts.write_text(yaml.safe_dump({"groups": alerting}, sort_keys=False), encoding="utf-8")
    with ExitStack() as stack:
        exporters: dict[str, ExporterProcess] = {}
        for cluster in CLUSTERS:
            exporters[cluster] = start_exporter(install, ZOO, workdir / cluster)
            stack.callback(exporters[cluster].stop)
        kube_state_metrics = {cluster: stack.enter_context(serve_text(KUBE_STATE_METRICS)) for cluster in CLUSTERS}
        for process in exporters.values():
            process.wait_listening(deadline_s=60)
        # each cluster also has a target where nothing listens (the "targets down" panel shows it)
        clusters = {cluster: stack.enter_context(ClusterPrometheus(
            cluster, [f"127.0.0.1:{exporters[cluster].port}", f"127.0.0.1:{free_port()}"],
            kube_state_metrics[cluster], rule_files=[alerts, cluster_recording], prometheus_binary=prometheus))
            for cluster in CLUSTERS}
        sidecars: dict[str, ThanosProcess] = {}
        for cluster, server in clusters.items():
            sidecars[cluster] = start_sidecar(thanos, server, server.tsdb, workdir / f"sidecar-{cluster}")
            stack.callback(sidecars[cluster].stop)
        ruler_grpc = free_port()
        query = stack.enter_context(ThanosQuery(
            thanos, [*(sidecar.grpc_address for sidecar in sidecars.values()), f"127.0.0.1:{ruler_grpc}"],
            replica_labels=list(RULER_LABELS)))
        for server in clusters.values():
            server.wait_for('up{job="gpu-pod-exporter"} == 1', lambda s: len(s) == 1, deadline_s=60)
            server.wait_for_rules_evaluated(deadline_s=60)
            server.wait_for("team:gpu_allocated:sum", lambda s: len(s) == len(ALLOCATION), deadline_s=60)
        ruler = start_ruler(thanos, query.url, [source], ruler_data, eval_interval=f"{INTERVAL_S}s",
                            query_offset=f"{RULER_QUERY_OFFSET_S}s", labels=RULER_LABELS, grpc_port=ruler_grpc)
        stack.callback(ruler.stop)
        query.wait_for_endpoints(3)
        wait_for(lambda: len(query.raw_query('team:gpu_allocated:sum{rule_replica="fleet"}'))
                   == len(CLUSTERS) * len(ALLOCATION), 90, "the ruler's first team allocation", 0.5)
        align_evaluations(clusters, query, recording, cluster_recording)
        yield Fleet(clusters, exporters, query, ruler, sidecars, recording, engine_version(thanos),
                    engine_version(prometheus))


def millisecond_in_second(timestamps: Iterable[float]) -> set[int]:
    """Where within the second (ms) samples were recorded: one value per rule group."""
    return {round(t * 1000) % 1000 for t in timestamps}


def align_evaluations(clusters: Mapping[str, ClusterPrometheus], query: ThanosQuery,
                      recording: list[dict[str, Any]], cluster_file: Path) -> None:
    """Move each cluster's evaluations of each recording group onto the ruler's instants.

    Prometheus and Thanos Ruler place a group's evaluations at an offset within the interval, a
    hash of the group's name and file (rules.Group.EvalTimestamp); the ruler evaluates a rewritten
    copy of each file, and the label hash differs between Prometheus' and Thanos' label builds, so
    the offsets differ. A group's ``query_offset`` moves its samples by whole milliseconds: each
    cluster group gets the 2 s of CLUSTER_QUERY_OFFSET_S plus the difference (under a second, so the
    ruler still reads the clusters' recordings 7 s after they are written). Then every sample the
    ruler records has a twin in each cluster with the same timestamp. Reloaded with SIGHUP.
    """
    at = time.time()
    for group in recording:
        name = str(group["rules"][0]["record"])
        ruler = wait_for(lambda name=name: millisecond_in_second(
            t for _, points in query.raw_samples(f'{name}{{rule_replica="fleet"}}[20s]', time.time())
            for t, _ in points), 60, f"the ruler's evaluations of {group['name']}", 0.5)
        local = millisecond_in_second(t for points in local_samples(clusters[CLUSTERS[0]], f"{name}[5s]", at).values()
                                      for t in points)
        assert len(ruler) == 1 and len(local) == 1, (group["name"], ruler, local)
        shift = (local.pop() - ruler.pop()) % 1000
        group["query_offset"] = f"{CLUSTER_QUERY_OFFSET_S * 1000 + shift}ms"
    cluster_file.write_text(yaml.safe_dump({"groups": recording}, sort_keys=False), encoding="utf-8")
    for server in clusters.values():
        assert server.process is not None
        server.process.send_signal(signal.SIGHUP)
    for group in recording:
        name = str(group["rules"][0]["record"])
        want = millisecond_in_second(t for _, points in query.raw_samples(
            f'{name}{{rule_replica="fleet"}}[20s]', time.time()) for t, _ in points)
        for server in clusters.values():
            wait_for(lambda server=server, name=name, want=want: millisecond_in_second(
                max(points) for points in local_samples(server, f"{name}[10s]", time.time()).values()) == want,
                60, f"the cluster's evaluations of {group['name']} on the ruler's instants", 0.5)
    for group in recording:
        del group["query_offset"]


Key = frozenset[tuple[str, str]]


def local_samples(server: PrometheusHarness, expr: str, at: float) -> dict[Key, dict[float, float]]:
    """A range selector's raw samples in one Prometheus: labels -> {timestamp: value}."""
    data = server.api("query", {"query": expr, "time": f"{at:.3f}"})
    return {frozenset(item["metric"].items()): {float(t): float(v) for t, v in item["values"]}
            for item in data["result"]}


def ruler_samples(fleet: Fleet, name: str, at: float, window_s: int) -> dict[str, dict[Key, dict[float, float]]]:
    """The ruler's raw samples of ``name`` through the Query, per cluster, labels without cluster/replica."""
    found: dict[str, dict[Key, dict[float, float]]] = {}
    for stored, points in fleet.query.raw_samples(f'{name}{{rule_replica="fleet"}}[{window_s}s]', at):
        labels = {k: v for k, v in stored.items() if k not in RULER_LABELS}
        cluster = labels.pop("cluster")
        found.setdefault(cluster, {})[frozenset(labels.items())] = dict(points)
    return found
