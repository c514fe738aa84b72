"""Which series feed which part of the report, and what to say when a cluster lacks one.

The report reads only recorded series (``deploy/rules/gpu-pod-exporter-recording.yaml``, group
``gpu-pod-exporter.cost-report``): they are cheap to read over months, and a long-term store
often keeps them longer than the raw ``DCGM_*`` series. Each ``Source`` names its recorded
series, the rule group that produces it, the exporter series that rule reads, and the columns it
feeds, so that a missing piece is reported as "cluster west lacks X (rule group Y, computed from
Z): column C is not available there" rather than as a silent zero.

How shared GPUs are split is a property of the source, written down in ``SPLITS``. The busy
share of a shared GPU follows each holder's measured use where the exporters read per-container
utilisation (NVML per-process samples, ``--kubernetes-process-attribution``; the recorded
``gpu_container:gpu_measured_use_share:ratio``) and the allocation share (1/N per holder)
elsewhere; the rules choose per GPU, ``splits`` says per cluster which one this report's data
used. DRA allocations (#17) would add a ``Source`` here with their own split.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RULE_FILE = "deploy/rules/gpu-pod-exporter-recording.yaml"
RULE_GROUP = "gpu-pod-exporter.cost-report"
ALLOCATION_INPUTS = ("DCGM_EXP_GPU_ALLOCATION_INFO", "DCGM_EXP_GPU_ALLOCATED")
UTILIZATION_INPUTS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
CLUSTER_LABEL = "cluster"
NODE_LABEL = "Hostname"  # the exporter's node-name label; read it only through node_name()


def node_name(labels: Mapping[str, str]) -> str:
    """The node a series comes from. The one place that knows how the exporter spells the label."""
    return labels.get(NODE_LABEL, "")


@dataclass(frozen=True)
class Source:
    """One recorded series the report reads."""

    key: str
    series: str
    inputs: tuple[str, ...]
    columns: str
    group: str = RULE_GROUP

    def rule_hint(self) -> str:
        return f"recording rule {self.series} (group {self.group} in {RULE_FILE})"


FRACTION = Source("fraction", "namespace_team_model:gpu_fraction:sum", ALLOCATION_INPUTS,
                  "allocated GPU-hours and cost")
BUSY = Source("busy", "namespace_team_model:gpu_busy_fraction:sum", UTILIZATION_INPUTS,
              "busy GPU-hours and utilisation")
MEASURED = Source("measured", "namespace_team_model:gpu_fraction_measured:sum", UTILIZATION_INPUTS,
                  "utilisation and unmeasured GPU-hours")
MEMORY = Source("memory", "namespace_team_model:gpu_memory_used_mib:sum", ("DCGM_FI_DEV_FB_USED",),
                "memory GiB-hours")
ENERGY = Source("energy", "namespace_team_model:gpu_energy_joules:increase5m",
                ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), "energy kWh")
HOLDER_FRACTION = Source("holder_fraction", "gpu_container:gpu_fraction:ratio", ALLOCATION_INPUTS,
                         "idle GPU-hours, GPUs to give back and the most idle pods")
HOLDER_UTILIZATION = Source("holder_utilization", "gpu_container:gpu_utilization:percent", UTILIZATION_INPUTS,
                            "idle GPU-hours, GPUs to give back and the most idle pods")
CAPACITY = Source("capacity", "cluster:gpu_physical:count", ("DCGM_EXP_GPU_ALLOCATED",),
                  "cluster capacity, unallocated GPU-hours and data coverage")

SOURCES: tuple[Source, ...] = (FRACTION, BUSY, MEASURED, MEMORY, ENERGY, HOLDER_FRACTION, HOLDER_UTILIZATION,
                               CAPACITY)

# Recorded where a shared GPU's per-container use is measured (optional: its absence is no gap).
MEASURED_USE_SHARE = "gpu_container:gpu_measured_use_share:ratio"

BUSY_BY_ALLOCATION = ("by allocation share: each of the N holders of a shared GPU is given 1/N of the device's "
                      "utilisation")
BUSY_MEASURED = ("by measured use: a shared GPU's busy time goes to its holders in proportion to their "
                 "processes' measured SM utilisation (DCGM_EXP_CONTAINER_SM_UTIL); what non-holders and "
                 "processes of no pod used is billed to nobody. GPUs without per-process samples (MIG, "
                 "drivers without them) and intervals in which nothing was measured fall back to the "
                 "allocation share")
SPLITS = {
    "allocation": "a GPU shared by N holders (time-slicing, MPS or other replicas) counts 1/N for each; "
                  "a MIG instance counts its compute slices out of the GPU's (n/7, n/4 on A30)",
    "busy": BUSY_BY_ALLOCATION + " (no per-container utilisation in this window: it needs the exporter's "
                                 "--kubernetes-process-attribution)",
    "memory": "a shared GPU's used memory is split by allocation share; a MIG instance reports its own",
    "energy": "a GPU's energy is split by the whole-GPU fraction each holder has; unallocated GPUs and "
              "MIG slices stay unattributed",
}


def splits(presence: Presence) -> dict[str, str]:
    """``SPLITS`` with the busy split this window's data used, per cluster where they differ."""
    result = dict(SPLITS)
    clusters = presence.known_clusters()
    measured = presence.clusters(MEASURED_USE_SHARE) & clusters
    if not measured:
        return result
    if measured == clusters:
        result["busy"] = BUSY_MEASURED
        return result
    names = ", ".join(cluster_name(cluster) for cluster in sorted(measured))
    others = ", ".join(cluster_name(cluster) for cluster in sorted(clusters - measured))
    result["busy"] = f"{BUSY_MEASURED} (in {names}); {BUSY_BY_ALLOCATION} (in {others}, which measure none)"
    return result


@dataclass(frozen=True)
class Presence:
    """Which clusters have each series in the report's window (``""``: series without the label)."""

    clusters_by_series: dict[str, frozenset[str]]

    def clusters(self, name: str) -> frozenset[str]:
        return self.clusters_by_series.get(name, frozenset())

    def has(self, source: Source, cluster: str) -> bool:
        return cluster in self.clusters(source.series)

    def known_clusters(self) -> frozenset[str]:
        """Every cluster that has allocation data, raw or recorded."""
        found: set[str] = set()
        for name in (*ALLOCATION_INPUTS, FRACTION.series, HOLDER_FRACTION.series, CAPACITY.series):
            found |= self.clusters(name)
        return frozenset(found)


def cluster_name(cluster: str) -> str:
    return f"cluster {cluster}" if cluster else "this Prometheus"


def missing_notes(presence: Presence) -> list[str]:
    """One line per cluster and missing piece, naming the series, its rule and its inputs."""
    notes: list[str] = []
    for cluster in sorted(presence.known_clusters()):
        where = cluster_name(cluster)
        missing = [source for source in SOURCES if not presence.has(source, cluster)]
        if not missing:
            continue
        if len(missing) == len(SOURCES):
            raw = [name for name in ALLOCATION_INPUTS if cluster in presence.clusters(name)]
            names = ", ".join(source.series for source in SOURCES)
            found = f"{' and '.join(raw) or 'allocation data'} {'are' if len(raw) > 1 else 'is'}"
            notes.append(f"{where}: none of the report's recorded series are there ({names}), "
                         f"although {found}: load the recording rules of group "
                         f"{RULE_GROUP} ({RULE_FILE}; the Helm chart installs them as a PrometheusRule) into its "
                         "Prometheus. Its GPUs are left out of this report.")
            continue
        for source in missing:
            absent_inputs = [name for name in source.inputs if cluster not in presence.clusters(name)]
            because = ""
            if absent_inputs and len(absent_inputs) == len(source.inputs):
                because = (f"; the exporter series it is computed from ({', '.join(source.inputs)}) are missing "
                           "there too" + (" (run the exporter with -k / --kubernetes)"
                                          if source.inputs == ALLOCATION_INPUTS else
                                          " (are they in the exporter's counters CSV?)"))
            notes.append(f"{where}: no {source.series} in this window ({source.rule_hint()} not loaded or not "
                         f"evaluated){because}: {source.columns} not available there.")
    return notes
