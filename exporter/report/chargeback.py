"""Chargeback: the bill per cost group, with unallocated capacity priced and optionally shared back.

The usage table of the report answers "who held what"; this answers "who pays what". It reads
the per-holder recorded series (``gpu_container:*``, group ``gpu-pod-exporter.cost-report``)
summed by the labels a price or a cost group needs, so that any pod label the exporter carries
(``--group-by label:cost-center``), the MIG profile (per-instance prices) and the node (node-pool
prices) are all still there:

* **cost groups** (``--group-by``): ``team``, ``namespace``, ``label:KEY`` or ``annotation:KEY``.
  A label is read from the exporter's series (pod labels copied with ``--kubernetes-enable-pod-labels``
  and ``--kubernetes-pod-label-allowlist-regex``, the chart's ``kubernetes.enablePodLabels`` and
  ``kubernetes.podLabelAllowlistRegex``), then from the namespace's labels in kube-state-metrics
  (``kube_namespace_labels``); an annotation from ``kube_pod_annotations`` then
  ``kube_namespace_annotations``. What has none is billed to the namespace (``--group-fallback
  namespace``) or to the explicit line ``unlabelled``.
* **prices** come from ``PriceSheet`` (``--pricing FILE`` or the flags): per model and node pool
  per whole-GPU hour, per MIG profile per instance-hour, energy per kWh of the measured energy.
* **unallocated capacity**: per cluster, model and node pool, the physical GPUs seen
  (``gpu:gpu_fraction:ratio``) minus the whole-GPU equivalents held, at each point, priced like the
  GPUs it is made of. ``--share-idle none`` bills it to the line ``(unallocated)``; ``even`` splits
  each cluster's among the cost groups that held GPUs there; ``proportional`` by their allocated
  GPU cost there (by GPU-hours when nothing was priced).
* **period over period**: the same bill for the previous period, per cost group and cluster, with
  how much of each period the cluster's data covers (the points at which Prometheus had any of its
  GPUs). A change in percent is shown only when the previous period is covered about as well as
  this one (``COMPARABLE_COVERAGE``): a previous period with a few seconds of data would otherwise
  read as "+2,900 %"; the table shows the previous period's coverage and a note says why the change
  is left out.

The arithmetic (``build_chargeback``) is pure; ``fetch_chargeback`` asks Prometheus.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.kube.labels import sanitize_label_name
from exporter.prometheus.client import PrometheusClient, Series
from exporter.report.model import Window
from exporter.report.pricing import PriceSheet
from exporter.report.sources import CLUSTER_LABEL, NODE_LABEL, node_name
from exporter.report.timespec import format_time

UNLABELLED = "unlabelled"
UNALLOCATED = "(unallocated)"
UNASSIGNED = "unassigned"
SHARE_MODES = ("none", "even", "proportional")
ENERGY_WINDOW_S = 300.0
EPSILON = 1e-9
# The change from the previous period is shown when its coverage is at least this share of this period's.
COMPARABLE_COVERAGE = 0.9

HOLDER_FRACTION = "gpu_container:gpu_fraction:ratio"
HOLDER_SHARE = "gpu_container:gpu_allocation_share:ratio"
HOLDER_UTILIZATION = "gpu_container:gpu_utilization:percent"
HOLDER_ENERGY = "gpu_container:gpu_energy_joules:increase5m"
DEVICE_FRACTION = "gpu:gpu_fraction:ratio"
# The recorded series the chargeback reads (all of group gpu-pod-exporter.cost-report or below it).
RECORDED_SERIES = (HOLDER_FRACTION, HOLDER_SHARE, HOLDER_UTILIZATION, HOLDER_ENERGY, DEVICE_FRACTION)


@dataclass(frozen=True)
class GroupBy:
    """What a cost group is: ``team``, ``namespace``, ``label:KEY`` or ``annotation:KEY``."""

    kind: str
    key: str = ""
    fallback_namespace: bool = False

    @classmethod
    def parse(cls, text: str, fallback: str = UNLABELLED) -> GroupBy:
        kind, sep, key = text.partition(":")
        if text in ("team", "namespace"):
            return cls(text, "", fallback == "namespace")
        if sep and kind in ("label", "annotation") and key.strip():
            return cls(kind, key.strip(), fallback == "namespace")
        raise ValueError(f"--group-by {text!r}: expected team, namespace, label:KEY or annotation:KEY")

    @property
    def series_label(self) -> str | None:
        """The label on the exporter's series that holds a pod label (as the exporter names it)."""
        return sanitize_label_name(self.key) if self.kind == "label" else None

    @property
    def ksm_label(self) -> str:
        """kube-state-metrics' name for the label or annotation (``label_cost_center``)."""
        return f"{self.kind}_{sanitize_label_name(self.key)}"

    def __str__(self) -> str:
        return f"{self.kind}:{self.key}" if self.key else self.kind


@dataclass(frozen=True)
class ChargeLine:
    """One line of the bill: a cost group's GPUs of one model, MIG profile and node pool in one cluster.

    ``kind`` is ``allocated`` (what the group's pods held) or ``unallocated`` (capacity nobody held,
    billed to ``(unallocated)`` or shared back to the group). Money is ``None`` where no price applies.
    """

    cluster: str
    group: str
    kind: str
    model: str
    mig_profile: str
    node_pool: str
    gpu_hours: float
    instance_hours: float | None
    busy_gpu_hours: float | None
    idle_gpu_hours: float | None
    energy_kwh: float | None
    price_per_gpu_hour: float | None
    gpu_cost: float | None
    energy_cost: float | None

    @property
    def cost(self) -> float | None:
        if self.gpu_cost is None and self.energy_cost is None:
            return None
        return (self.gpu_cost or 0.0) + (self.energy_cost or 0.0)


@dataclass(frozen=True)
class GroupTotal:
    """A cost group's bill in one cluster, this period and the previous one."""

    cluster: str
    group: str
    gpu_hours: float
    idle_gpu_hours: float
    gpu_cost: float | None
    energy_cost: float | None
    unallocated_cost: float | None
    cost: float | None
    previous_cost: float | None
    coverage_percent: float | None = None  # of the cluster, this period and the previous one
    previous_coverage_percent: float | None = None

    @property
    def comparable(self) -> bool:
        """The previous period's data covers about as much of it as this period's covers of this one."""
        return comparable(self.coverage_percent, self.previous_coverage_percent)

    @property
    def change_percent(self) -> float | None:
        if self.cost is None or not self.previous_cost or not self.comparable:
            return None
        return 100.0 * (self.cost - self.previous_cost) / self.previous_cost


def comparable(coverage: float | None, previous: float | None) -> bool:
    """Whether a change between two periods with these coverages (percent) says something."""
    return previous is not None and coverage is not None and previous + EPSILON >= COMPARABLE_COVERAGE * coverage


@dataclass(frozen=True)
class Chargeback:
    window: Window
    previous: Window | None
    group_by: str
    share_idle: str
    currency: str
    lines: tuple[ChargeLine, ...]
    totals: tuple[GroupTotal, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChargebackData:
    """What Prometheus returned for one period."""

    window: Window
    holders: dict[str, list[Series]]
    capacity: list[Series]
    node_labels: list[Series]
    namespace_meta: list[Series]
    pod_meta: list[Series]


# ------------------------------------------------------------------------------------ queries
def _keys(group_by: GroupBy) -> list[str]:
    keys = [CLUSTER_LABEL, "namespace", "team", "modelName", "GPU_I_PROFILE", NODE_LABEL]
    if group_by.kind == "annotation":
        keys.append("pod")
    if group_by.series_label:
        keys.append(group_by.series_label)
    return keys


def queries(group_by: GroupBy, matcher: str, idle_threshold: float, window_s: float,
            pool_label: str | None) -> dict[str, str]:
    """The PromQL of the chargeback (holder series by ``_keys``, capacity, kube-state-metrics metadata)."""
    def select(name: str) -> str:
        return f"{name}{{{matcher}}}" if matcher else name

    by = ", ".join(_keys(group_by))
    fraction, utilization = select(HOLDER_FRACTION), select(HOLDER_UTILIZATION)
    result = {
        "fraction": f"sum by ({by}) ({fraction})",
        "share": f"sum by ({by}) ({select(HOLDER_SHARE)})",
        "busy": f"sum by ({by}) ({fraction} * {utilization} / 100)",
        "measured": f"sum by ({by}) ({fraction} and {utilization})",
        "idle": f"sum by ({by}) ({fraction} and ({utilization} < {idle_threshold:g}))",
        "energy": f"sum by ({by}) ({select(HOLDER_ENERGY)})",
        "capacity": f"count by ({CLUSTER_LABEL}, modelName, {NODE_LABEL}) "
                    f"(count by ({CLUSTER_LABEL}, modelName, {NODE_LABEL}, UUID) ({select(DEVICE_FRACTION)}))",
    }
    lookback = f"{max(1, int(window_s))}s"
    if pool_label:
        name = f"label_{sanitize_label_name(pool_label)}"
        result["node_labels"] = (f"max by ({CLUSTER_LABEL}, node, {name}) "
                                 f"(last_over_time({select('kube_node_labels')}[{lookback}]))")
    if group_by.kind in ("label", "annotation"):
        kind = "labels" if group_by.kind == "label" else "annotations"
        result["namespace_meta"] = (f"max by ({CLUSTER_LABEL}, namespace, {group_by.ksm_label}) "
                                    f"(last_over_time({select('kube_namespace_' + kind)}[{lookback}]))")
    if group_by.kind == "annotation":
        result["pod_meta"] = (f"max by ({CLUSTER_LABEL}, namespace, pod, {group_by.ksm_label}) "
                              f"(last_over_time({select('kube_pod_annotations')}[{lookback}]))")
    return result


def fetch_chargeback(client: PrometheusClient, window: Window, group_by: GroupBy, *, matcher: str,
                     idle_threshold: float, pool_label: str | None) -> ChargebackData:
    exprs = queries(group_by, matcher, idle_threshold, window.end - window.start, pool_label)
    first, last = window.start + window.step, window.end

    def over_window(expr: str) -> list[Series]:
        return client.query_range(expr, first, last, window.step)

    def at_end(key: str) -> list[Series]:
        return client.query_range(exprs[key], last, last, window.step) if key in exprs else []

    holders = {key: over_window(exprs[key]) for key in ("fraction", "share", "busy", "measured", "idle", "energy")}
    return ChargebackData(window, holders, over_window(exprs["capacity"]), at_end("node_labels"),
                          at_end("namespace_meta"), at_end("pod_meta"))


# --------------------------------------------------------------------------------- arithmetic
def coverage_by_cluster(data: ChargebackData) -> dict[str, float]:
    """Per cluster, the percentage of the period's points at which Prometheus had any of its GPUs
    (the capacity series) or any holder: what a comparison of two periods can rest on."""
    seen: dict[str, set[int]] = defaultdict(set)
    points = data.window.points
    for series in [*data.capacity, *data.holders.get("fraction", ())]:
        indices = seen[series.labels.get(CLUSTER_LABEL, "")]
        for timestamp, _ in series.points:
            index = round((timestamp - data.window.start) / data.window.step) - 1
            if 0 <= index < points:
                indices.add(index)
    return {cluster: 100.0 * len(indices) / points for cluster, indices in seen.items()} if points else {}


def _aligned(series: Series, window: Window) -> list[float]:
    values = [0.0] * window.points
    for timestamp, value in series.points:
        index = round((timestamp - window.start) / window.step) - 1
        if 0 <= index < window.points and math.isfinite(value):
            values[index] = value
    return values


def _identity(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


class _Grouper:
    """Cost group and node pool of a holder series, from its labels and the metadata fetched."""

    def __init__(self, data: ChargebackData, group_by: GroupBy, prices: PriceSheet) -> None:
        self.group_by = group_by
        self.prices = prices
        pool_name = f"label_{sanitize_label_name(prices.pool_label)}" if prices.pool_label else ""
        self.node_pools = {(s.labels.get(CLUSTER_LABEL, ""), s.labels.get("node", "")): s.labels[pool_name]
                           for s in data.node_labels if s.labels.get(pool_name)}
        meta = group_by.ksm_label
        self.namespace_meta = {(s.labels.get(CLUSTER_LABEL, ""), s.labels.get("namespace", "")): s.labels[meta]
                               for s in data.namespace_meta if s.labels.get(meta)}
        self.pod_meta = {(s.labels.get(CLUSTER_LABEL, ""), s.labels.get("namespace", ""), s.labels.get("pod", "")):
                         s.labels[meta] for s in data.pod_meta if s.labels.get(meta)}

    def group(self, labels: Mapping[str, str]) -> str:
        cluster, namespace = labels.get(CLUSTER_LABEL, ""), labels.get("namespace", "")
        kind = self.group_by.kind
        if kind == "team":
            return labels.get("team") or UNASSIGNED
        if kind == "namespace":
            return namespace
        value = None
        if kind == "label" and self.group_by.series_label:
            value = labels.get(self.group_by.series_label)
        elif kind == "annotation":
            value = self.pod_meta.get((cluster, namespace, labels.get("pod", "")))
        value = value or self.namespace_meta.get((cluster, namespace))
        if value:
            return value
        return namespace if self.group_by.fallback_namespace and namespace else UNLABELLED

    def pool(self, cluster: str, node: str) -> str:
        return self.node_pools.get((cluster, node)) or self.prices.pool_of_node(node) or ""


@dataclass
class _Sums:
    gpu_hours: float = 0.0
    instance_hours: float = 0.0
    busy: float = 0.0
    measured: float = 0.0
    idle: float = 0.0
    energy_kwh: float = 0.0
    gpu_cost: float = 0.0
    unpriced: bool = False


def _period_lines(data: ChargebackData, group_by: GroupBy, prices: PriceSheet,
                  unpriced: set[str]) -> tuple[list[ChargeLine], list[tuple[str, str, str, float, float | None]]]:
    """Allocated lines, and the unallocated capacity as (cluster, model, pool, GPU-hours, cost)."""
    window = data.window
    hours = window.step / 3600.0
    grouper = _Grouper(data, group_by, prices)
    by_identity: dict[str, dict[tuple[tuple[str, str], ...], float]] = {
        key: {_identity(s.labels): math.fsum(_aligned(s, window)) for s in data.holders.get(key, [])}
        for key in ("share", "busy", "measured", "idle", "energy")}
    sums: dict[tuple[str, str, str, str, str], _Sums] = defaultdict(_Sums)
    held: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0] * window.points)
    for series in data.holders.get("fraction", []):
        labels = series.labels
        cluster, model, profile = labels.get(CLUSTER_LABEL, ""), labels.get("modelName", ""), labels.get(
            "GPU_I_PROFILE", "")
        node = node_name(labels)
        pool = grouper.pool(cluster, node)
        values = _aligned(series, window)
        target = held[(cluster, model, node)]
        for index, value in enumerate(values):
            target[index] += value
        identity = _identity(labels)
        gpu_hours = math.fsum(values) * hours
        instance_hours = by_identity["share"].get(identity, 0.0) * hours
        idle_hours = by_identity["idle"].get(identity, 0.0) * hours
        line = sums[(cluster, grouper.group(labels), model, profile, pool)]
        line.gpu_hours += gpu_hours
        line.instance_hours += instance_hours
        line.busy += by_identity["busy"].get(identity, 0.0) * hours
        line.measured += by_identity["measured"].get(identity, 0.0) * hours
        line.idle += idle_hours
        line.energy_kwh += by_identity["energy"].get(identity, 0.0) * window.step / ENERGY_WINDOW_S / 3.6e6
        cost = _allocated_cost(prices, model, profile, pool, gpu_hours=gpu_hours, instance_hours=instance_hours)
        if cost is None:
            if gpu_hours > EPSILON:
                line.unpriced = True
                unpriced.add(model or "(no modelName)")
            continue
        line.gpu_cost += cost
    lines = [_charge_line(key, item, prices) for key, item in sums.items()]
    return lines, _unallocated(data, held, grouper, prices, unpriced)


def _allocated_cost(prices: PriceSheet, model: str, profile: str, pool: str, *, gpu_hours: float,
                    instance_hours: float) -> float | None:
    """What an allocation costs: its MIG instance-hours at the profile's price, else its GPU-hours at the
    model's (in the pool's sheet); None when neither has a price."""
    instance_price = prices.instance_hour_price(profile)
    if instance_price is not None:
        return instance_hours * instance_price
    price = prices.gpu_hour_price(model, pool or None)
    return gpu_hours * price if price is not None else None


def _charge_line(key: tuple[str, str, str, str, str], item: _Sums, prices: PriceSheet) -> ChargeLine:
    """One allocated line from its sums: priced only when every part of it had a price."""
    cluster, group, model, profile, pool = key
    priced = not item.unpriced and not prices.empty
    return ChargeLine(
        cluster, group, "allocated", model, profile, pool, item.gpu_hours, item.instance_hours, item.busy,
        item.idle, item.energy_kwh,
        item.gpu_cost / item.gpu_hours if priced and item.gpu_hours > EPSILON else None,
        item.gpu_cost if priced else None,
        item.energy_kwh * prices.energy_per_kwh if prices.energy_per_kwh is not None else None)


def _unallocated(data: ChargebackData, held: Mapping[tuple[str, str, str], list[float]], grouper: _Grouper,
                 prices: PriceSheet, unpriced: set[str]) -> list[tuple[str, str, str, float, float | None]]:
    """Capacity no pod held, per (cluster, model, pool): GPU-hours and their cost (None without a price)."""
    window = data.window
    hours = window.step / 3600.0
    free: dict[tuple[str, str, str], float] = defaultdict(float)
    for series in data.capacity:
        cluster, model = series.labels.get(CLUSTER_LABEL, ""), series.labels.get("modelName", "")
        node = node_name(series.labels)
        allocation = held.get((cluster, model, node), [0.0] * window.points)
        spare = math.fsum(max(0.0, c - a) for c, a in zip(_aligned(series, window), allocation, strict=True))
        free[(cluster, model, grouper.pool(cluster, node))] += spare * hours
    unallocated = []
    for (cluster, model, pool), gpu_hours in sorted(free.items()):
        if gpu_hours <= EPSILON:
            continue
        price = prices.gpu_hour_price(model, pool or None)
        if price is None and not prices.empty:
            unpriced.add(model or "(no modelName)")
        unallocated.append((cluster, model, pool, gpu_hours, gpu_hours * price if price is not None else None))
    return unallocated


def _share(lines: list[ChargeLine], unallocated: list[tuple[str, str, str, float, float | None]],
           mode: str) -> list[ChargeLine]:
    """Unallocated capacity as lines: to ``(unallocated)``, or shared among each cluster's cost groups."""
    weights: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_cost: dict[str, bool] = defaultdict(lambda: True)
    for line in lines:
        if line.gpu_hours > EPSILON:
            weights[line.cluster][line.group] += line.gpu_cost or 0.0
            if line.gpu_cost is None:
                by_cost[line.cluster] = False
    hours_weights: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in lines:
        hours_weights[line.cluster][line.group] += line.gpu_hours
    result = []
    for cluster, model, pool, gpu_hours, cost in unallocated:
        groups = sorted(g for g, h in hours_weights[cluster].items() if h > EPSILON)
        if mode == "none" or not groups:
            shares = {UNALLOCATED: 1.0}
        elif mode == "even":
            shares = {group: 1.0 / len(groups) for group in groups}
        else:
            table = weights[cluster] if by_cost[cluster] and math.fsum(weights[cluster].values()) > EPSILON \
                else hours_weights[cluster]
            total = math.fsum(table[g] for g in groups)
            shares = {group: table[group] / total for group in groups}
        price = cost / gpu_hours if cost is not None else None
        for group, share in shares.items():
            result.append(ChargeLine(cluster, group, "unallocated", model, "", pool, gpu_hours * share, None,
                                     None, None, None, price, cost * share if cost is not None else None, None))
    return result


def _money(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return math.fsum(known) if known else None


def _totals(lines: Sequence[ChargeLine]) -> dict[tuple[str, str], GroupTotal]:
    grouped: dict[tuple[str, str], list[ChargeLine]] = defaultdict(list)
    for line in lines:
        grouped[(line.cluster, line.group)].append(line)
    result = {}
    for (cluster, group), items in grouped.items():
        # a group's GPU-hours are what it held; the (unallocated) line's are the capacity nobody held
        own = [line for line in items if line.kind == "allocated" or group == UNALLOCATED]
        shared = [line for line in items if line.kind == "unallocated"]  # shared back by --share-idle
        result[(cluster, group)] = GroupTotal(
            cluster, group, math.fsum(line.gpu_hours for line in own),
            math.fsum(line.idle_gpu_hours or 0.0 for line in own),
            _money([line.gpu_cost for line in own]), _money([line.energy_cost for line in own]),
            _money([line.gpu_cost for line in shared]) if group != UNALLOCATED else None,
            _money([line.cost for line in items]), None)
    return result


def _coverage_notes(coverage: Mapping[str, float], previous: Mapping[str, float], window: Window) -> list[str]:
    """One note per cluster whose previous period has too little data for a change to mean anything."""
    notes = []
    for cluster in sorted(set(coverage) | set(previous)):
        now, before = coverage.get(cluster, 0.0), previous.get(cluster, 0.0)
        if not comparable(now, before):
            name = f"cluster {cluster}" if cluster else "the cluster"
            notes.append(f"chargeback: Prometheus has data of {name} for {before:.3g} % of the previous period "
                         f"({format_time(window.start)} to {format_time(window.end)}) against {now:.3g} % of this "
                         "one: its previous costs are partial and no change is shown")
    return notes


def build_chargeback(current: ChargebackData, previous: ChargebackData | None, group_by: GroupBy, *,
                     prices: PriceSheet, share_idle: str, currency: str) -> Chargeback:
    """The bill of ``current`` (pure), with each group's total of ``previous`` beside it."""
    unpriced: set[str] = set()
    lines, unallocated = _period_lines(current, group_by, prices, unpriced)
    lines = [line for line in lines if line.gpu_hours > EPSILON] + _share(lines, unallocated, share_idle)
    lines.sort(key=lambda x: (x.cluster, x.group == UNALLOCATED, x.group, x.kind, x.model, x.mig_profile,
                              x.node_pool))
    totals = _totals(lines)
    before: dict[tuple[str, str], GroupTotal] = {}
    if previous is not None:
        old_lines, old_unallocated = _period_lines(previous, group_by, prices, set())
        before = _totals([line for line in old_lines if line.gpu_hours > EPSILON]
                         + _share(old_lines, old_unallocated, share_idle))
    coverage = coverage_by_cluster(current)
    previous_coverage = coverage_by_cluster(previous) if previous is not None else {}
    rows = []
    for key in sorted(set(totals) | set(before), key=lambda k: (k[0], k[1] == UNALLOCATED, k[1])):
        now = totals.get(key) or GroupTotal(key[0], key[1], 0.0, 0.0, None, None, None, None, None)
        old = before.get(key)
        rows.append(GroupTotal(now.cluster, now.group, now.gpu_hours, now.idle_gpu_hours, now.gpu_cost,
                               now.energy_cost, now.unallocated_cost, now.cost,
                               old.cost if old is not None else None, coverage.get(key[0], 0.0),
                               None if previous is None else previous_coverage.get(key[0], 0.0)))
    notes = _coverage_notes(coverage, previous_coverage, previous.window) if previous is not None else []
    if unpriced:
        notes.append("chargeback: no price for " + ", ".join(sorted(unpriced))
                     + ": its GPU-hours are billed without a cost (add it to the pricing file)")
    if group_by.kind in ("label", "annotation"):
        source = (f"the pod label {group_by.key} on the exporter's series ({group_by.series_label}; it needs "
                  "--kubernetes-enable-pod-labels with the key in --kubernetes-pod-label-allowlist-regex, the "
                  "chart's kubernetes.enablePodLabels and kubernetes.podLabelAllowlistRegex), then "
                  "kube_namespace_labels"
                  if group_by.kind == "label" else
                  f"kube_pod_annotations then kube_namespace_annotations ({group_by.ksm_label}; kube-state-"
                  "metrics' --metric-annotations-allowlist)")
        fallback = "the namespace" if group_by.fallback_namespace else f"the line {UNLABELLED}"
        notes.append(f"chargeback: cost groups from {source}; pods with neither go to {fallback}")
    return Chargeback(current.window, previous.window if previous is not None else None, str(group_by),
                      share_idle, currency, tuple(lines), tuple(rows), tuple(notes))
