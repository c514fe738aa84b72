"""Per-GPU quarantine on DRA nodes: find a GPU's devices and keep the node's DeviceTaintRules in step.

The rules themselves (names, selectors, effects) are ``devicetaints`` (pure); this is the part that
asks the API server: whether it serves DeviceTaintRules at all (once), the node's ResourceSlices,
and the writes. A GPU without DRA devices keeps the node taint.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from exporter.logs import get_logger
from exporter.remediate import devicetaints as dt
from exporter.remediate.audit import Audit
from exporter.remediate.kubeapi import ApiError, KubeApi
from exporter.remediate.ledger import NODE_LEVEL, NodeLedger
from exporter.remediate.nodestate import Marks, read_marks
from exporter.remediate.policy import Policy

log = get_logger("remediate")


class DeviceRuleWriter:
    def __init__(self, policy: Policy, api: KubeApi, ledger: NodeLedger, audit: Audit) -> None:
        self.policy = policy
        self.api = api
        self.ledger = ledger
        self.audit = audit
        self._version: str | None = None  # the resource.k8s.io version serving DeviceTaintRules
        self._version_known = False

    def served(self) -> str | None:
        """The resource.k8s.io version serving DeviceTaintRules, asked once; None: node taints only."""
        if not self._version_known:
            self._version = self.api.device_taint_rule_version(dt.VERSIONS)
            self._version_known = True
            if self._version is None:
                log.warning("device_taints is on but the API server serves no DeviceTaintRule (Kubernetes 1.36: "
                            "--runtime-config resource.k8s.io/v1beta2/devicetaintrules=true and the "
                            "DRADeviceTaintRules feature gate); GPUs are quarantined by node taints")
            else:
                log.info("DRA GPUs are quarantined by DeviceTaintRules", extra={"fields": {
                    "api": f"{dt.GROUP}/{self._version}"}})
        return self._version

    def with_devices(self, node: str, desired: Marks) -> Marks:
        """Look up, once per GPU, the DRA devices of newly tainted GPUs; a GPU without any keeps the node taint."""
        if not self.policy.device_taints:
            return desired
        todo = [mark for mark in desired.gpus.values()
                if mark.taint_effect and not mark.devices and mark.uuid != NODE_LEVEL]
        if not todo or self.served() is None:
            return desired
        slices = self.slices(node)
        for mark in todo:
            devices = dt.devices_of_gpu(slices, node, mark.uuid)
            if devices:
                desired = desired.with_gpu(replace(mark, devices=devices))
        return desired

    def dra_gpu_nodes(self) -> set[str]:
        """Nodes whose GPUs are published through DRA (they have no nvidia.com/gpu allocatable), so that the
        share limit counts them as GPU nodes; none unless device_taints is on and the rules are served."""
        if not self.policy.device_taints or self.served() is None:
            return set()
        return {node for node in (str((item.get("spec") or {}).get("nodeName") or "")
                                  for item in self.slices(None) if dt.publishes_gpus(item)) if node}

    def slices(self, node: str | None) -> list[dict[str, Any]]:
        """ResourceSlices (of ``node``, or all); none when the remediator may not read them (403, 404), so that
        a missing RBAC rule leaves the GPU to the node taint rather than in service. Transient errors raise:
        the node's change waits for the next pass."""
        try:
            return self.api.list_resource_slices(node)
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            self.audit.states.once(("slices", exc.status), logging.WARNING,
                                   "cannot read ResourceSlices (the chart grants it with remediation.deviceTaints); "
                                   "GPUs are quarantined by node taints", error=str(exc))
            return []

    def bodies(self, node: str, marks: Marks) -> list[dict[str, Any]]:
        version = self._version or dt.VERSIONS[0]
        drained = self.ledger.drained(node)
        return [dt.rule_body(version, node, mark.uuid, mark.gpu, device,
                             effect=dt.device_effect(mark.taint_effect or "NoSchedule",
                                                     drain_configured=self.policy.drain is not None, drained=drained))
                for mark in marks.device_marks for device in mark.devices]

    def write(self, node: str, current: Marks, desired: Marks) -> str:
        """Make the node's DeviceTaintRules those of ``desired``; what was done ("" when nothing)."""
        if not (current.device_marks or desired.device_marks) or self.served() is None:
            return ""
        version = str(self._version)
        existing = [rule for rule in self.api.list_device_taint_rules(version, f"{dt.MANAGED_BY[0]}={dt.MANAGED_BY[1]}")
                    if (rule.get("metadata", {}).get("annotations") or {}).get(dt.NODE_LABEL) == node]
        changes = dt.rule_changes(existing, self.bodies(node, desired))
        for body in changes.apply:
            self.api.apply_device_taint_rule(version, body)
            self.audit.metrics.count("taint", "applied")
        for name in changes.delete:
            self.api.delete_device_taint_rule(version, name)
            self.audit.metrics.count("untaint", "applied")
        return dt.describe(changes)

    def describe(self, node: str, current: Marks, desired: Marks) -> str:
        """What ``write`` would do, without doing it (dry-run and events)."""
        return dt.describe(dt.rule_changes(self.bodies(node, current), self.bodies(node, desired)))

    def after_drain(self, node: str) -> None:
        """The drain is done: rules whose policy asks NoExecute get it now (nothing is left for it to delete)."""
        if not self.policy.device_taints or not self.policy.changes_nodes:
            return
        try:
            marks = read_marks(self.api.get_node(node))
            done = self.write(node, marks, marks)
        except ApiError as exc:
            self.audit.error("cannot update the node's DeviceTaintRules after the drain", exc, node=node)
            return
        if done:
            log.info("remediation transition", extra={"fields": {"node": node, "event": "DeviceTaintRules",
                                                                 "state": "drained", "why": done}})
