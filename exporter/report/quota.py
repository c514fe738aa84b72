"""Quota plans: each namespace's GPU ResourceQuota against the GPUs it measurably kept in use.

Pure arithmetic over the report (``compute.build_report`` with rows per namespace) and the
ResourceQuotas read from the cluster; no I/O, so tests feed it plain values.

The measured need is the report's own "GPUs to give back" figure: the p95 of GPUs in use (held
minus the idle part; a GPU without a utilisation reading counts as in use) over the points where
the namespace held anything (``--reclaim-by peak`` makes it the peak). A namespace that held
nothing all window needs 0. With ``headroom`` percent added and rounded up to a whole device (a
GPU quota counts devices), that is the proposed quota, never below ``min_quota``.

The plan only ever *lowers* a quota: taking back what sat idle is what platform teams asked for,
and raising a quota is a capacity decision that measured use under that very quota cannot make
(use can never show more than the quota allowed). Lowering a quota below what a namespace holds
now evicts nothing: the API server only refuses new pods and claims beyond it.

Namespaces with too little data are left alone and named, never guessed at:

* the cluster's exporters were seen for less than ``min_coverage`` percent of the window
  (``cluster:gpu_physical:count``: a gap would hide use);
* the namespace's GPUs had a utilisation reading for less than ``min_coverage`` percent of the
  GPU-hours it held (unmeasured time counts as in use, so its p95 says little);
* the cluster lacks the per-holder series the give-back figure is computed from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from exporter.report.model import ReclaimRow, Report, Usage

# The quota keys of GPUs: the device plugin's extended resource (quota on extended resources
# exists only with the requests. prefix) and DRA's per-device-class count of the NVIDIA DRA
# driver's GPU class.
DEFAULT_RESOURCES = ("requests.nvidia.com/gpu", "gpu.nvidia.com.deviceclass.resource.k8s.io/devices")
FIELD_MANAGER = "gpu-pod-exporter-quota"
EPSILON = 1e-9

LOWER, KEEP, NO_DATA = "lower", "keep", "too-little-data"


class QuotaError(ValueError):
    """A ResourceQuota value the plan cannot read (a fractional or malformed device count)."""


@dataclass(frozen=True)
class QuotaEntry:
    """One GPU key of one ResourceQuota object, as the API server returned it."""

    namespace: str
    name: str
    resource: str
    hard: int
    used: int | None = None


@dataclass(frozen=True)
class PlanSettings:
    cluster: str
    headroom_percent: float = 20.0
    min_quota: int = 0
    min_coverage_percent: float = 90.0
    reclaim_by: str = "p95"


@dataclass(frozen=True)
class PlanRow:
    """What to do with one quota key, and why."""

    namespace: str
    quota: str
    resource: str
    current: int
    used_now: int | None
    measured_need: float | None  # p95 (or peak) of GPUs in use; None without enough data
    with_headroom: float | None
    proposed: int
    action: str  # lower | keep | too-little-data
    why: str

    @property
    def changes(self) -> bool:
        return self.action == LOWER


@dataclass(frozen=True)
class QuotaPlan:
    cluster: str
    window_start: float
    window_end: float
    settings: PlanSettings
    rows: tuple[PlanRow, ...]

    @property
    def changes(self) -> tuple[PlanRow, ...]:
        return tuple(row for row in self.rows if row.changes)

    @property
    def left_alone(self) -> tuple[str, ...]:
        return tuple(sorted({row.namespace for row in self.rows if row.action == NO_DATA}))


_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|m)?$")
_SUFFIX: dict[str, Decimal | int] = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def device_count(text: object) -> int:
    """A Kubernetes quantity that counts devices (``"8"``, ``"1k"``) as an integer; QuotaError otherwise."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise QuotaError(f"{text!r} is not a Kubernetes quantity")
    try:
        value = Decimal(match.group(1)) * Decimal(_SUFFIX[match.group(2) or ""])
    except InvalidOperation:
        raise QuotaError(f"{text!r} is not a Kubernetes quantity") from None
    if value != value.to_integral_value():
        raise QuotaError(f"{text!r} is not a whole number of devices")
    return int(value)


def quota_entries(objects: Iterable[Mapping[str, object]], resources: Sequence[str],
                  namespaces: Sequence[str] = ()) -> tuple[list[QuotaEntry], list[str]]:
    """The GPU keys of ResourceQuota objects (JSON as listed), and a note per value that is not a device count."""
    entries, notes = [], []
    for item in objects:
        metadata = item.get("metadata") or {}
        spec = item.get("spec") or {}
        status = item.get("status") or {}
        if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping) or not isinstance(status, Mapping):
            continue
        namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
        if namespaces and namespace not in namespaces:
            continue
        hard = spec.get("hard") or {}
        used = status.get("used") or {}
        if not isinstance(hard, Mapping) or not isinstance(used, Mapping):
            continue
        for resource in resources:
            if resource not in hard:
                continue
            try:
                entry = QuotaEntry(namespace, name, resource, device_count(hard[resource]),
                                   device_count(used[resource]) if resource in used else None)
            except QuotaError as error:
                notes.append(f"{namespace}/{name} {resource}: {error}; left alone")
                continue
            entries.append(entry)
    entries.sort(key=lambda e: (e.namespace, e.name, e.resource))
    return entries, notes


def build_plan(report: Report, entries: Sequence[QuotaEntry], settings: PlanSettings) -> QuotaPlan:
    """The plan for ``entries`` from a report computed with rows per namespace (``--by namespace``)."""
    cluster = settings.cluster
    coverage = next((c.coverage_percent for c in report.capacity if c.cluster == cluster), 0.0)
    reclaim = {r.namespace: r for r in report.reclaim if r.cluster == cluster}
    usage = {r.key: r.usage for r in report.rows if r.cluster == cluster}
    give_back_computed = not any(note.startswith(_cluster_prefix(cluster)) and "GPUs to give back are not computed"
                                 in note for note in report.notes)
    rows = []
    for entry in entries:
        if coverage + EPSILON < settings.min_coverage_percent:
            reason = (f"the exporters were seen for {coverage:.1f} % of the window "
                      f"(needs {settings.min_coverage_percent:g} %)")
        elif not give_back_computed:
            reason = "the cluster lacks the per-holder series GPUs in use are computed from"
        else:
            reason = _unmeasured(usage.get(entry.namespace), settings)
        if reason:
            rows.append(PlanRow(entry.namespace, entry.name, entry.resource, entry.hard, entry.used, None, None,
                                entry.hard, NO_DATA, f"left alone: {reason}"))
        else:
            rows.append(_planned_row(entry, reclaim.get(entry.namespace), settings))
    return QuotaPlan(cluster, report.window.start, report.window.end, settings, tuple(rows))


def _unmeasured(usage: Usage | None, settings: PlanSettings) -> str:
    """Why a namespace's utilisation is too thinly measured to size its quota ("" when it is not)."""
    if usage is None or usage.allocated_gpu_hours <= EPSILON:
        return ""
    share = 100.0 * (usage.measured_gpu_hours or 0.0) / usage.allocated_gpu_hours
    if share + EPSILON >= settings.min_coverage_percent:
        return ""
    return (f"utilisation was measured for {share:.1f} % of its {usage.allocated_gpu_hours:.1f} "
            f"GPU-hours (needs {settings.min_coverage_percent:g} %)")


def _planned_row(entry: QuotaEntry, found: ReclaimRow | None, settings: PlanSettings) -> PlanRow:
    """Lower the quota to the GPUs in use (peak or p95) plus headroom, rounded up; else keep it."""
    need = 0.0 if found is None else (found.peak_in_use if settings.reclaim_by == "peak" else found.p95_in_use)
    with_headroom = need * (1.0 + settings.headroom_percent / 100.0)
    target = max(settings.min_quota, math.ceil(with_headroom - EPSILON))
    figure = f"{settings.reclaim_by} in use {need:.2f} GPUs" if found is not None else "no GPU held all window"
    if target < entry.hard:
        why = (f"{figure}; +{settings.headroom_percent:g} % headroom = {with_headroom:.2f}, rounded up"
               + (f" (at least --min-quota {settings.min_quota})" if target == settings.min_quota
                  and settings.min_quota > 0 else ""))
        return PlanRow(entry.namespace, entry.name, entry.resource, entry.hard, entry.used, need, with_headroom,
                       target, LOWER, why)
    return PlanRow(entry.namespace, entry.name, entry.resource, entry.hard, entry.used, need, with_headroom,
                   entry.hard, KEEP, f"{figure}; with headroom {with_headroom:.2f} needs the whole quota")


def _cluster_prefix(cluster: str) -> str:
    from exporter.report.sources import cluster_name  # noqa: PLC0415 - one spelling of a cluster's name

    return f"{cluster_name(cluster)}:"


def patches(plan: QuotaPlan) -> list[dict[str, object]]:
    """Server-side-apply-ready ResourceQuota objects: one per quota the plan lowers, with only its GPU keys.

    Applied with a field manager of their own (``kubectl apply --server-side --field-manager
    gpu-pod-exporter-quota --force-conflicts``), they take over exactly these keys of ``spec.hard``
    and leave every other key, label and manager of the object as it is.
    """
    by_object: dict[tuple[str, str], dict[str, str]] = {}
    for row in plan.changes:
        by_object.setdefault((row.namespace, row.quota), {})[row.resource] = str(row.proposed)
    return [{"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": name, "namespace": namespace},
             "spec": {"hard": dict(sorted(hard.items()))}}
            for (namespace, name), hard in sorted(by_object.items())]
