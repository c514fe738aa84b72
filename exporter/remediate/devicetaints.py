"""Per-GPU quarantine on DRA clusters: one DeviceTaintRule per unhealthy GPU instead of a node taint. Pure.

Where a node's GPUs are published through Dynamic Resource Allocation (ResourceSlices of NVIDIA's
DRA driver, each GPU a device with its ``uuid`` attribute), the scheduler allocates devices, not
nodes: a ``DeviceTaintRule`` (resource.k8s.io) that selects one device by driver, pool and device
name keeps new claims off that GPU while the node and its other GPUs stay in service. A node
taint would take all of them out (one bad GPU, seven good ones idle). On device-plugin clusters
the scheduler sees only a count of ``nvidia.com/gpu`` per node and the kubelet's device plugin
picks the device, so nothing but the node can be marked: the node taint stays there.

Effects: the policy's ``NoSchedule`` and ``NoExecute`` are the device taint's own. ``NoExecute``
makes kube-controller-manager's device-taint-eviction controller *delete* the pods using the
device, which no PodDisruptionBudget holds back; so when the policy has a ``drain``, the rule
stays ``NoSchedule`` until the remediator's drain (the Eviction API, PDB 429s paced) has evicted
the GPU's pods, and only then becomes ``NoExecute``. ``PreferNoSchedule`` has no device
equivalent: it becomes ``None``, which the API defines as a dry run (the rule's status says what
NoExecute would evict).

Rules are named from the node and device (stable across restarts, so re-creating one is an
idempotent apply), labelled with the node for listing, and carry the GPU's UUID and index as
annotations for people.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.kube.resourceslices import slice_from_json

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1alpha3")  # where DeviceTaintRule may be served, newest first
PLURAL = "devicetaintrules"
TAINT_KEY = "gpu-pod-exporter/unhealthy-gpu"
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpu-pod-exporter-remediate")
NODE_LABEL = "gpu-pod-exporter/node"
UUID_ANNOTATION = "gpu-pod-exporter/gpu-uuid"
GPU_ANNOTATION = "gpu-pod-exporter/gpu"
DEVICE_EFFECTS = {"PreferNoSchedule": "None", "NoSchedule": "NoSchedule", "NoExecute": "NoExecute"}
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class DeviceRef:
    """One published device: what a DeviceTaintRule's selector names."""

    driver: str
    pool: str
    device: str

    def to_json(self) -> list[str]:
        return [self.driver, self.pool, self.device]

    @staticmethod
    def from_json(data: object) -> DeviceRef | None:
        if isinstance(data, list) and len(data) == 3 and all(isinstance(x, str) and x for x in data):
            return DeviceRef(*data)
        return None


def devices_of_gpu(slices: Iterable[Mapping[str, Any]], node: str, uuid: str) -> tuple[DeviceRef, ...]:
    """The devices of GPU ``uuid`` that ``node``'s ResourceSlices publish: the GPU itself, or its MIG devices.

    Empty when the GPU is not published through DRA (a device-plugin node): the node taint applies.
    Malformed slices are skipped (the exporter's attribution reports them; here they only cannot help).
    """
    found: list[DeviceRef] = []
    for obj in slices:
        try:
            content = slice_from_json(obj)
        except ValueError:
            continue
        if content.node and content.node != node:
            continue
        for device in content.devices:
            if device.uuid == uuid or (device.parent_uuid == uuid and device.uuid.startswith("MIG-")):
                found.append(DeviceRef(device.driver, device.pool, device.name))
    return tuple(sorted(set(found), key=lambda d: (d.driver, d.pool, d.device)))


def publishes_gpus(obj: Mapping[str, Any]) -> bool:
    """Does this ResourceSlice publish a GPU (a device of type gpu or mig, or with a GPU/MIG UUID)?"""
    try:
        content = slice_from_json(obj)
    except ValueError:
        return False
    return any(d.type in ("gpu", "mig") or d.uuid.startswith(("GPU-", "MIG-")) for d in content.devices)


def rule_name(node: str, device: DeviceRef) -> str:
    """A stable DNS-subdomain name for the rule of ``device`` on ``node`` (readable part + hash)."""
    digest = hashlib.sha256("/".join((node, *device.to_json())).encode()).hexdigest()[:10]
    readable = re.sub(r"[^a-z0-9.-]+", "-", f"{node}.{device.device}".lower()).strip(".-")
    return f"unhealthy-gpu.{readable[:200]}.{digest}".replace("..", ".")


def device_effect(policy_effect: str, *, drain_configured: bool, drained: bool) -> str:
    """The rule's effect for the policy's ``taint_effect`` (see the module docstring)."""
    effect = DEVICE_EFFECTS.get(policy_effect, "NoSchedule")
    if effect == "NoExecute" and drain_configured and not drained:
        return "NoSchedule"  # the PDB-respecting drain first; NoExecute only once nothing is left to delete
    return effect


def rule_body(version: str, node: str, uuid: str, gpu: str, device: DeviceRef, *, effect: str) -> JsonObject:
    labels = {MANAGED_BY[0]: MANAGED_BY[1]}
    if len(node) <= 63 and _LABEL_VALUE.match(node):
        labels[NODE_LABEL] = node
    return {
        "apiVersion": f"{GROUP}/{version}", "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name(node, device), "labels": labels,
                     "annotations": {UUID_ANNOTATION: uuid, GPU_ANNOTATION: gpu, NODE_LABEL: node}},
        "spec": {"deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.device},
                 "taint": {"key": TAINT_KEY, "value": gpu if _LABEL_VALUE.match(gpu) and len(gpu) <= 63 else "",
                           "effect": effect}},
    }


@dataclass(frozen=True)
class RuleChanges:
    """What to do to make the rules of one node the wanted ones."""

    apply: tuple[JsonObject, ...]
    delete: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.apply or self.delete)


def rule_changes(existing: Sequence[Mapping[str, Any]], wanted: Sequence[JsonObject]) -> RuleChanges:
    """Rules to apply (missing, or with another selector or taint) and to delete (ours, no longer wanted)."""
    by_name = {str(rule.get("metadata", {}).get("name", "")): rule for rule in existing}
    names = {str(body["metadata"]["name"]) for body in wanted}
    apply = []
    for body in wanted:
        have = by_name.get(str(body["metadata"]["name"]))
        spec = (have or {}).get("spec") or {}
        taint = spec.get("taint") or {}
        same = have is not None and spec.get("deviceSelector") == body["spec"]["deviceSelector"] and \
            (taint.get("key"), taint.get("value", ""), taint.get("effect")) == \
            (body["spec"]["taint"]["key"], body["spec"]["taint"]["value"], body["spec"]["taint"]["effect"])
        if not same:
            apply.append(body)
    delete = sorted(name for name in by_name if name not in names)
    return RuleChanges(tuple(apply), tuple(delete))


def describe(changes: RuleChanges) -> str:
    parts = [f"DeviceTaintRule {body['metadata']['name']} ({body['spec']['deviceSelector']['driver']}/"
             f"{body['spec']['deviceSelector']['pool']}/{body['spec']['deviceSelector']['device']}: "
             f"{TAINT_KEY}:{body['spec']['taint']['effect']})" for body in changes.apply]
    if parts:
        parts = ["write " + ", ".join(parts)]
    if changes.delete:
        parts.append("delete DeviceTaintRule " + ", ".join(changes.delete))
    return "; ".join(parts)
