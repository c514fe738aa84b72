"""Synthetic exporter series with known answers, written as OpenMetrics for ``promtool`` backfill.

The series look like the exporter's (the same names and labels, workload labels only on an
exclusively held device, ``vgpu`` on the holders of a shared one, MIG instances with
``GPU_I_PROFILE``/``GPU_I_ID``, energy per physical GPU) and are sampled every minute on the
minute. Every value is piecewise constant over whole hours, and a holding or a utilisation piece
covers the half-open interval (from, to], the same way a report point covers the step before it,
so the report's numbers can be worked out by hand (``test_backfill_exact`` does, in comments).

``EAST`` is a cluster with the recording rules backfilled; ``WEST`` is added afterwards as raw
series only, the "cluster that lacks the rules" case. Times are hours from ``WINDOW_START``
(2025-06-02T00:00:00Z); data starts an hour earlier so that 5-minute energy windows are full.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

WINDOW_START = 1748822400  # 2025-06-02T00:00:00Z
WINDOW_HOURS = 48
DATA_FROM_H = -1.0
SAMPLE_S = 120  # also the rule evaluation interval and the report step of the tests
ALWAYS = (-2.0, WINDOW_HOURS + 1.0)
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


@dataclass(frozen=True)
class Device:
    """A whole GPU (``profile`` None) or one MIG instance of the physical GPU ``uuid``."""

    cluster: str
    host: str
    index: int
    uuid: str
    model: str
    profile: str | None = None
    instance_id: str | None = None

    def labels(self) -> dict[str, str]:
        labels = {"gpu": str(self.index), "UUID": self.uuid, "device": f"nvidia{self.index}", "modelName": self.model}
        if self.profile is not None and self.instance_id is not None:
            labels |= {"GPU_I_PROFILE": self.profile, "GPU_I_ID": self.instance_id}
        return labels | {"Hostname": self.host}

    def physical_labels(self) -> dict[str, str]:
        return {"gpu": str(self.index), "UUID": self.uuid, "device": f"nvidia{self.index}", "modelName": self.model,
                "Hostname": self.host}


@dataclass(frozen=True)
class Holding:
    """A container holding a device over (start_h, end_h]; ``replica`` set on a shared GPU."""

    device: Device
    namespace: str
    pod: str
    container: str
    team: str | None
    start_h: float
    end_h: float
    replica: str | None = None
    pod_labels: tuple[tuple[str, str], ...] = ()  # as the exporter copies them (sanitised names)

    def workload(self) -> dict[str, str]:
        labels = {"container": self.container, "namespace": self.namespace, "pod": self.pod}
        return labels | ({"team": self.team} if self.team else {}) | dict(self.pod_labels)


Pieces = tuple[tuple[float, float, float], ...]  # (from_h, to_h, value) over (from, to]


@dataclass
class Cluster:
    name: str
    devices: list[Device]
    holdings: list[Holding]
    utilization: dict[Device, Pieces] = field(default_factory=dict)  # % (GPU_UTIL) or 0-1 (MIG GR_ENGINE_ACTIVE)
    memory_mib: dict[Device, Pieces] = field(default_factory=dict)
    power_w: dict[str, float] = field(default_factory=dict)  # per physical GPU UUID
    # kube-state-metrics' series (label_* / annotation_* labels), constant over the data
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    namespace_annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    pod_annotations: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def ksm_series(self) -> list[tuple[str, dict[str, str]]]:
        """(metric, labels) of every kube-state-metrics series of the cluster."""
        target = {"cluster": self.name, "instance": "kube-state-metrics:8080", "job": "kube-state-metrics"}
        out = [("kube_namespace_labels", {"namespace": ns} | labels | target)
               for ns, labels in self.namespace_labels.items()]
        out += [("kube_namespace_annotations", {"namespace": ns} | labels | target)
                for ns, labels in self.namespace_annotations.items()]
        out += [("kube_pod_annotations", {"namespace": ns, "pod": pod} | labels | target)
                for (ns, pod), labels in self.pod_annotations.items()]
        out += [("kube_node_labels", {"node": node} | labels | target) for node, labels in self.node_labels.items()]
        return out

    def holders(self, device: Device, hour: float) -> list[Holding]:
        return [h for h in self.holdings if h.device == device and h.start_h < hour <= h.end_h]


def value_at(pieces: Pieces, hour: float) -> float | None:
    for start, end, value in pieces:
        if start < hour <= end:
            return value
    return None


def _target(cluster: str, host: str) -> dict[str, str]:
    return {"cluster": cluster, "instance": f"{host}:9400", "job": "gpu-pod-exporter"}


Samples = dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]]


def samples(cluster: Cluster, offset_s: float = 0.0, until_h: float = WINDOW_HOURS, *,
            origin: float = WINDOW_START, sample_s: int = SAMPLE_S, from_h: float = DATA_FROM_H,
            energy_lead_s: float | None = None) -> Samples:
    """metric -> label set -> [(unix time, value)]: one sample a minute, ``offset_s`` after the minute.

    (``sample_s`` apart from ``origin + from_h`` hours in general; ``energy_lead_s`` adds an energy
    sample that long before each one, so that a rule's ``increase(...[5m])`` sees two samples even
    when ``sample_s`` is longer than 5 minutes.)

    The sample taken ``offset_s`` after minute m shows the state of the minute that ends at m + 1
    (the slot a report point at m + 1 stands for): the recording rules, evaluated ``offset_s``
    after each minute, read it at once, and a report point on the minute reads that evaluation.
    """
    out: Samples = defaultdict(lambda: defaultdict(list))

    def add(metric: str, labels: dict[str, str], timestamp: float, value: float) -> None:
        out[metric][tuple(labels.items())].append((timestamp, value))

    physical = {d.uuid: d for d in cluster.devices}
    shared = {h.device for h in cluster.holdings if h.replica is not None}
    steps = round((until_h - from_h) * 3600 / sample_s)
    for step in range(steps):
        timestamp = origin + from_h * 3600 + step * sample_s + offset_s
        hour = from_h + (step + 1) * sample_s / 3600.0
        for device in cluster.devices:
            target = _target(cluster.name, device.host)
            holders = cluster.holders(device, hour)
            base = device.labels()
            add("DCGM_EXP_GPU_ALLOCATED", base | target, timestamp, 1.0 if holders else 0.0)
            for holder in holders:
                vgpu = {"vgpu": holder.replica} if device in shared and holder.replica is not None else {}
                add("DCGM_EXP_GPU_ALLOCATION_INFO", base | holder.workload() | vgpu | target, timestamp, 1.0)
            workload = holders[0].workload() if len(holders) == 1 and device not in shared else {}
            utilization = value_at(cluster.utilization.get(device, ()), hour)
            if utilization is not None:
                metric = "DCGM_FI_PROF_GR_ENGINE_ACTIVE" if device.profile else "DCGM_FI_DEV_GPU_UTIL"
                add(metric, base | workload | target, timestamp, utilization)
            memory = value_at(cluster.memory_mib.get(device, ()), hour)
            if memory is not None:
                add("DCGM_FI_DEV_FB_USED", base | workload | target, timestamp, memory)
        for uuid, watts in cluster.power_w.items():
            device = physical[uuid]
            whole = [d for d in cluster.devices if d.uuid == uuid]
            holders = cluster.holders(device, hour) if len(whole) == 1 and device not in shared else []
            workload = holders[0].workload() if len(holders) == 1 else {}
            energy_labels = device.physical_labels() | workload | _target(cluster.name, device.host)
            elapsed = step * sample_s + 86400  # linear in time: constant power
            if energy_lead_s is not None:
                add("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy_labels, timestamp - energy_lead_s,
                    watts * 1000.0 * (elapsed - energy_lead_s))
            add("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy_labels, timestamp, watts * 1000.0 * elapsed)
        for metric, labels in cluster.ksm_series():
            add(metric, labels, timestamp, 1.0)
    return out


def openmetrics(clusters: Iterable[Cluster], offset_s: float = 0.0, until_h: float = WINDOW_HOURS,
                **timing: Any) -> Iterator[str]:
    """OpenMetrics text lines (families contiguous, samples in time order), ending with ``# EOF``."""
    merged: Samples = defaultdict(dict)
    for cluster in clusters:
        for metric, series in samples(cluster, offset_s, until_h, **timing).items():
            merged[metric].update(series)
    for metric in sorted(merged):
        yield f"# TYPE {metric} gauge\n"
        for labels, points in merged[metric].items():
            text = ",".join(f'{name}="{value}"' for name, value in labels)
            for timestamp, value in points:
                number = str(int(value)) if value.is_integer() else repr(value)
                yield f"{metric}{{{text}}} {number} {timestamp:.3f}\n"
    yield "# EOF\n"


# --------------------------------------------------------------------------------------- EAST
_A = [Device("east", "node-a", i, f"GPU-a{i}", H100) for i in range(5)]
_B_3G = Device("east", "node-b", 0, "GPU-b0", A100, "3g.40gb", "1")
_B_2G = Device("east", "node-b", 0, "GPU-b0", A100, "2g.20gb", "3")
_B_1G = Device("east", "node-b", 0, "GPU-b0", A100, "1g.10gb", "7")
_B1 = Device("east", "node-b", 1, "GPU-b1", A100)


# pod labels the exporter copies with --kubernetes-enable-pod-labels and the allowlist "^cost-center$"
CC_100 = (("cost_center", "cc-100"),)
CC_200 = (("cost_center", "cc-200"),)


def east() -> Cluster:
    """The cluster with known answers (see the module docstring; totals in test_backfill_exact)."""
    a0, a1, a2, a3, a4 = _A
    holdings = [
        # research: one training pod on two whole H100s, busy 90 %
        Holding(a0, "ml-training", "train-0", "trainer", "research", *ALWAYS, pod_labels=CC_100),
        Holding(a1, "ml-training", "train-0", "trainer", "research", *ALWAYS, pod_labels=CC_100),
        # research: a notebook that sat idle on a whole GPU for the first day, then let it go
        Holding(a2, "notebooks", "nb-alice", "notebook", "research", ALWAYS[0], 24.0),
        # research: a notebook on a MIG 1g slice whose device reports no utilisation (unmeasured)
        Holding(_B_1G, "notebooks", "nb-bob", "notebook", "research", *ALWAYS),
        # research: a sandbox holding two GPUs, one idle except hour 10-11, one busy 80 %
        Holding(a3, "sandbox", "sandbox-0", "main", "research", *ALWAYS),
        Holding(a4, "sandbox", "sandbox-1", "main", "research", *ALWAYS),
        # serving: a time-sliced A100, two pods throughout and a third from hour 12 to 36
        Holding(_B1, "inference", "chat-0", "server", "serving", *ALWAYS, replica="0"),
        Holding(_B1, "inference", "chat-1", "server", "serving", *ALWAYS, replica="1"),
        Holding(_B1, "inference", "embed-0", "embedder", "serving", 12.0, 36.0, replica="2"),
        # recsys (team from the pod label): a 3g.40gb slice, busy 50 % on day one, 2 % on day two
        Holding(_B_3G, "batch", "sweep-1", "sweep", "recsys", *ALWAYS, pod_labels=CC_200),
        # no team: a 2g.20gb slice for hours 6-18, busy 30 %
        Holding(_B_2G, "batch", "etl-0", "etl", None, 6.0, 18.0),
    ]
    return Cluster(
        name="east",
        devices=[*_A, _B_3G, _B_2G, _B_1G, _B1],
        holdings=holdings,
        utilization={
            a0: ((*ALWAYS, 90.0),), a1: ((*ALWAYS, 90.0),), a2: ((*ALWAYS, 0.0),),
            a3: ((ALWAYS[0], 10.0, 0.0), (10.0, 11.0, 50.0), (11.0, ALWAYS[1], 0.0)),
            a4: ((*ALWAYS, 80.0),),
            _B1: ((ALWAYS[0], 40.0, 60.0), (40.0, ALWAYS[1], 2.0)),
            _B_3G: ((ALWAYS[0], 24.0, 0.5), (24.0, ALWAYS[1], 0.02)),
            _B_2G: ((ALWAYS[0], 6.0, 0.0), (6.0, 18.0, 0.3), (18.0, ALWAYS[1], 0.0)),
        },
        memory_mib={
            a0: ((*ALWAYS, 60000.0),), a1: ((*ALWAYS, 60000.0),),
            a2: ((ALWAYS[0], 24.0, 2048.0), (24.0, ALWAYS[1], 0.0)),
            a3: ((*ALWAYS, 1024.0),), a4: ((*ALWAYS, 20000.0),),
            _B1: ((*ALWAYS, 30000.0),),
            _B_3G: ((*ALWAYS, 30000.0),),
            _B_2G: ((ALWAYS[0], 6.0, 0.0), (6.0, 18.0, 10000.0), (18.0, ALWAYS[1], 0.0)),
            _B_1G: ((*ALWAYS, 4000.0),),
        },
        power_w={"GPU-a0": 400.0, "GPU-a1": 400.0, "GPU-a2": 100.0, "GPU-a3": 70.0, "GPU-a4": 300.0,
                 "GPU-b0": 350.0, "GPU-b1": 300.0},
        # chargeback metadata (kube-state-metrics): cost centres of two namespaces, a project annotation on
        # the chat pods and on ml-training, and node-b in the node pool "spot"
        namespace_labels={"notebooks": {"label_cost_center": "cc-300"}, "inference": {"label_cost_center": "cc-200"},
                          "sandbox": {"label_owner": "someone"}},
        namespace_annotations={"ml-training": {"annotation_billing_example_com_project": "training"}},
        pod_annotations={("inference", "chat-0"): {"annotation_billing_example_com_project": "chat"},
                         ("inference", "chat-1"): {"annotation_billing_example_com_project": "chat"}},
        node_labels={"node-a": {"label_kubernetes_io_os": "linux"},
                     "node-b": {"label_cloud_google_com_gke_nodepool": "spot"}},
    )


def west() -> Cluster:
    """A cluster whose Prometheus never had the recording rules: raw exporter series only."""
    device = Device("west", "node-w", 0, "GPU-w0", H100)
    return Cluster(
        name="west",
        devices=[device],
        holdings=[Holding(device, "vision", "train-w", "trainer", "vision", *ALWAYS)],
        utilization={device: ((*ALWAYS, 70.0),)},
        memory_mib={device: ((*ALWAYS, 1000.0),)},
        power_w={"GPU-w0": 200.0},
    )
