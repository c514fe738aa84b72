"""Our marks on a Node object: read them, and the patches that turn one set of marks into another. Pure.

What the remediator writes on a node, and only that (everything else on the node is left as is):

* the taint ``gpu-pod-exporter/unhealthy-gpu=<gpus>:<effect>``. Kubernetes allows one taint per
  key and effect, so one taint names every unhealthy GPU of the node: their indexes joined by
  ``_`` (``3``, ``0_3``), the strongest effect any of their alerts asks for;
* ``spec.unschedulable`` (cordon), only when an alert's policy opts in, and undone only if the
  remediator was the one that cordoned the node (an administrator's cordon is never lifted);
* the annotation ``gpu-pod-exporter/unhealthy-gpus`` (comma-separated GPU UUIDs) for people and
  tools, and ``gpu-pod-exporter/remediation`` (JSON) with what the remediator needs to carry on
  after a restart: per GPU the alert fingerprints that marked it, and the time of its last
  transition (for the cooldown);
* the node condition ``UnhealthyGPU`` (status True with the alert and GPUs as reason and message,
  False once cleared), the Kubernetes-native place for "why" (``kubectl describe node``).

A GPU published through DRA (its mark carries ``devices``, with ``device_taints`` in the policy) is
quarantined by DeviceTaintRules (``devicetaints``) instead of the node taint: it is left out of the
taint's value and effect, but it still restricts the node (the breaker, the episode and the
re-admission gate count it), and its mark, annotation and condition stay on the node, which
remains the one place the remediator's state lives.

Taints are a list without a merge key, so a strategic-merge patch replaces the whole list: the
patch carries the node's full list with only our entry changed, plus ``metadata.resourceVersion``
so that the API server answers 409 Conflict if anyone changed the node in between (the caller
then reads it again and recomputes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from exporter.remediate.devicetaints import DeviceRef

TAINT_KEY = "gpu-pod-exporter/unhealthy-gpu"
GPUS_ANNOTATION = "gpu-pod-exporter/unhealthy-gpus"
STATE_ANNOTATION = "gpu-pod-exporter/remediation"
PHASE_ANNOTATION = "gpu-pod-exporter/remediation-phase"  # JSON {phase, why, since}: beyond "quarantined"
CONDITION_TYPE = "UnhealthyGPU"
CONDITION_CLEARED_REASON = "GpusHealthy"
EFFECT_STRENGTH = {"PreferNoSchedule": 1, "NoSchedule": 2, "NoExecute": 3}
MAX_LABEL_VALUE = 63
MAX_CONDITION_MESSAGE = 1024

JsonObject = dict[str, Any]


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class GpuMark:
    """One unhealthy GPU as recorded on the node."""

    uuid: str
    gpu: str  # NVML index as the alert's ``gpu`` label has it
    alerts: Mapping[str, str]  # fingerprint -> alert name
    since: str  # RFC 3339
    taint_effect: str | None = None  # None: its alerts ask for no taint
    cordon: bool = False
    annotate: bool = False
    condition: bool = False
    devices: tuple[DeviceRef, ...] = ()  # published through DRA: quarantined by DeviceTaintRules

    @property
    def node_taint(self) -> str | None:
        """The effect this GPU adds to the node taint: none when DeviceTaintRules quarantine it."""
        return None if self.devices else self.taint_effect

    def to_json(self) -> JsonObject:
        data: JsonObject = {"gpu": self.gpu, "alerts": dict(self.alerts), "since": self.since,
                            "taint_effect": self.taint_effect, "cordon": self.cordon, "annotate": self.annotate,
                            "condition": self.condition}
        if self.devices:
            data["devices"] = [device.to_json() for device in self.devices]
        return data

    @staticmethod
    def from_json(uuid: str, data: Mapping[str, Any]) -> GpuMark:
        alerts = data.get("alerts") if isinstance(data.get("alerts"), dict) else {}
        effect = data.get("taint_effect")
        return GpuMark(uuid=uuid, gpu=str(data.get("gpu", "")),
                       alerts=MappingProxyType({str(k): str(v) for k, v in (alerts or {}).items()}),
                       since=str(data.get("since", "")),
                       taint_effect=effect if effect in EFFECT_STRENGTH else None,
                       cordon=data.get("cordon") is True, annotate=data.get("annotate") is True,
                       condition=data.get("condition") is True,
                       devices=tuple(d for d in (DeviceRef.from_json(x) for x in data.get("devices") or [])
                                     if d is not None))


@dataclass(frozen=True)
class Marks:
    """Everything the remediator has put on one node."""

    gpus: Mapping[str, GpuMark] = field(default_factory=lambda: MappingProxyType({}))
    cordoned_by_us: bool = False
    last_transition: datetime | None = None

    @property
    def taint_effect(self) -> str | None:
        """The node taint's effect: the strongest of the GPUs not quarantined by DeviceTaintRules."""
        effects = [mark.node_taint for mark in self.gpus.values() if mark.node_taint]
        return max(effects, key=EFFECT_STRENGTH.__getitem__) if effects else None

    @property
    def device_marks(self) -> list[GpuMark]:
        """The GPUs quarantined by DeviceTaintRules."""
        return [mark for _, mark in sorted(self.gpus.items()) if mark.devices and mark.taint_effect]

    @property
    def wants_cordon(self) -> bool:
        return any(mark.cordon for mark in self.gpus.values())

    @property
    def restricts(self) -> bool:
        """Does this state take capacity away (our taint or our cordon)?"""
        return self.taint_effect is not None or self.cordoned_by_us or bool(self.device_marks)

    def taint_value(self) -> str:
        indexes = sorted((mark.gpu for mark in self.gpus.values() if mark.node_taint),
                         key=lambda gpu: (not gpu.isdigit(), int(gpu) if gpu.isdigit() else 0, gpu))
        value = "_".join(gpu if gpu.replace("-", "").isalnum() else "unknown" for gpu in indexes) or "unknown"
        return value[:MAX_LABEL_VALUE].rstrip("_")

    def with_gpu(self, mark: GpuMark) -> Marks:
        return replace(self, gpus=MappingProxyType({**self.gpus, mark.uuid: mark}))

    def without_gpu(self, uuid: str) -> Marks:
        return replace(self, gpus=MappingProxyType({k: v for k, v in self.gpus.items() if k != uuid}))

    def state_json(self) -> str:
        return json.dumps({"gpus": {uuid: mark.to_json() for uuid, mark in sorted(self.gpus.items())},
                           "cordoned": self.cordoned_by_us,
                           "last_transition": rfc3339(self.last_transition) if self.last_transition else None},
                          sort_keys=True, separators=(",", ":"))


def read_marks(node: Mapping[str, Any]) -> Marks:
    """Our marks from a node object; an unreadable state annotation counts as none (logged by the caller)."""
    annotations = node.get("metadata", {}).get("annotations") or {}
    raw = annotations.get(STATE_ANNOTATION)
    if not raw:
        return Marks()
    try:
        data = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return Marks()
    if not isinstance(data, dict):
        return Marks()
    gpus = data.get("gpus") if isinstance(data.get("gpus"), dict) else {}
    return Marks(
        gpus=MappingProxyType({str(uuid): GpuMark.from_json(str(uuid), value)
                               for uuid, value in (gpus or {}).items() if isinstance(value, dict)}),
        cordoned_by_us=data.get("cordoned") is True,
        last_transition=parse_time(data.get("last_transition")),
    )


def our_taint(node: Mapping[str, Any]) -> JsonObject | None:
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("key") == TAINT_KEY:
            return dict(taint)
    return None


def restricted_by_us(node: Mapping[str, Any]) -> bool:
    """Does the node carry our taint, a cordon we made, or GPUs under our DeviceTaintRules? (What the breaker
    counts.)"""
    marks = read_marks(node)
    return our_taint(node) is not None or bool(marks.device_marks) or (
        marks.cordoned_by_us and bool(node.get("spec", {}).get("unschedulable")))


def has_gpus(node: Mapping[str, Any], prefixes: tuple[str, ...]) -> bool:
    """A GPU node: some allocatable resource whose name starts with one of ``prefixes`` is non-zero."""
    allocatable = node.get("status", {}).get("allocatable") or node.get("status", {}).get("capacity") or {}
    return any(name.startswith(prefixes) and str(quantity) not in ("0", "")
               for name, quantity in allocatable.items())


def _annotation_patch(node: Mapping[str, Any], desired: Marks) -> JsonObject:
    """Our annotations that differ from the node's (None: remove)."""
    existing = node.get("metadata", {}).get("annotations") or {}
    # Kept once written (with no GPUs): the time of the last transition outlives the marks, for the cooldown.
    state = desired.state_json() if desired.gpus or desired.cordoned_by_us or desired.last_transition else None
    listed = ",".join(sorted(uuid for uuid, mark in desired.gpus.items() if mark.annotate)) or None
    return {key: value for key, value in ((STATE_ANNOTATION, state), (GPUS_ANNOTATION, listed))
            if existing.get(key) != value}


def _taints(node: Mapping[str, Any], desired: Marks) -> list[JsonObject]:
    """The node's taints with ours as ``desired`` has it (its timeAdded kept when it does not change)."""
    taints = [dict(taint) for taint in node.get("spec", {}).get("taints") or [] if taint.get("key") != TAINT_KEY]
    effect = desired.taint_effect
    if effect is not None:
        mine = our_taint(node)
        wanted = {"key": TAINT_KEY, "value": desired.taint_value(), "effect": effect}
        if mine is not None and mine.get("value") == wanted["value"] and mine.get("effect") == effect:
            wanted = mine  # keep its timeAdded
        taints.append(wanted)
    return taints


def _unschedulable(node: Mapping[str, Any], current: Marks, desired: Marks) -> bool | None:
    """The cordon to write: True (ours), False (lift ours), None (leave it)."""
    unschedulable = bool(node.get("spec", {}).get("unschedulable"))
    if desired.cordoned_by_us and not unschedulable:
        return True
    if current.cordoned_by_us and not desired.cordoned_by_us and unschedulable:
        return False
    return None


def node_patch(node: Mapping[str, Any], current: Marks, desired: Marks) -> JsonObject | None:
    """The strategic-merge patch for ``/nodes/<name>`` from ``current`` to ``desired``; None: no change."""
    patch: JsonObject = {}
    annotations = _annotation_patch(node, desired)
    if annotations:
        patch["metadata"] = {"annotations": annotations}
    taints = _taints(node, desired)
    if taints != list(node.get("spec", {}).get("taints") or []):
        patch["spec"] = {"taints": taints}
    cordon = _unschedulable(node, current, desired)
    if cordon is not None:
        patch.setdefault("spec", {})["unschedulable"] = cordon
    if not patch:
        return None
    patch.setdefault("metadata", {})["resourceVersion"] = node.get("metadata", {}).get("resourceVersion", "")
    return patch


def condition_patch(node: Mapping[str, Any], desired: Marks, now: datetime) -> JsonObject | None:
    """The ``/nodes/<name>/status`` patch for our condition; None when it already says so."""
    conditions = node.get("status", {}).get("conditions") or []
    mine = next((c for c in conditions if c.get("type") == CONDITION_TYPE), None)
    flagged = [mark for mark in desired.gpus.values() if mark.condition]
    if flagged:
        alerts = sorted({name for mark in flagged for name in mark.alerts.values()})
        status, reason = "True", alerts[0] if len(alerts) == 1 else "MultipleGpuAlerts"
        message = "; ".join(f"GPU {mark.gpu} ({mark.uuid}): {', '.join(sorted(set(mark.alerts.values())))}"
                            for mark in sorted(flagged, key=lambda m: m.uuid))
        message = f"unhealthy GPUs reported by gpu-pod-exporter: {message}"[:MAX_CONDITION_MESSAGE]
    elif mine is not None and mine.get("status") == "True":
        status, reason, message = "False", CONDITION_CLEARED_REASON, "no GPU of this node is marked unhealthy"
    else:
        return None
    if mine is not None and (mine.get("status"), mine.get("reason"), mine.get("message")) == (status, reason, message):
        return None
    stamp = rfc3339(now)
    transition = mine.get("lastTransitionTime", stamp) if mine is not None and mine.get("status") == status else stamp
    return {"status": {"conditions": [{"type": CONDITION_TYPE, "status": status, "reason": reason,
                                       "message": message, "lastHeartbeatTime": stamp,
                                       "lastTransitionTime": transition}]}}
