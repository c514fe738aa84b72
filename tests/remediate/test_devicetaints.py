"""Per-GPU quarantine on DRA nodes, the pure parts: which devices a GPU is, the rules, the node's marks.

The behaviour against a real API server, scheduler and controller-manager is
tests/platform/test_device_taints.py; this covers the decisions that one real run cannot vary.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import MappingProxyType

import pytest

from exporter.remediate import devicetaints as dt
from exporter.remediate.nodestate import (
    STATE_ANNOTATION,
    TAINT_KEY,
    GpuMark,
    Marks,
    node_patch,
    read_marks,
    restricted_by_us,
)
from exporter.remediate.policy import PolicyError, load_policy
from simulator.dra_devices import DRIVER, gpu_device, mig_device
from simulator.fakeapiserver import resource_slice

GPU0, GPU1, MIG = "GPU-aaaa", "GPU-bbbb", "MIG-cccc"
SLICES = [
    resource_slice("n1-gpus", DRIVER, "n1", [gpu_device(0, GPU0), mig_device(1, GPU1, MIG, "3g.40gb", 3)],
                   node_name="n1"),
    resource_slice("n2-gpus", DRIVER, "n2", [gpu_device(0, "GPU-other")], node_name="n2"),
]
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def test_a_gpu_is_its_published_device_or_its_mig_devices() -> None:
    assert dt.devices_of_gpu(SLICES, "n1", GPU0) == (dt.DeviceRef(DRIVER, "n1", "gpu-0"),)
    assert dt.devices_of_gpu(SLICES, "n1", GPU1) == (dt.DeviceRef(DRIVER, "n1", "gpu-1-mig-3g40gb-3"),)
    assert dt.devices_of_gpu(SLICES, "n1", "GPU-other") == ()  # another node's slice
    assert dt.devices_of_gpu([], "n1", GPU0) == ()  # a device-plugin node: the node taint stays
    assert dt.devices_of_gpu([{"spec": "broken"}, *SLICES], "n1", GPU0)  # a malformed slice is skipped


def test_rule_names_are_stable_valid_and_distinct() -> None:
    a = dt.rule_name("gpu-node-17.example.com", dt.DeviceRef(DRIVER, "gpu-node-17", "gpu-3"))
    assert a == dt.rule_name("gpu-node-17.example.com", dt.DeviceRef(DRIVER, "gpu-node-17", "gpu-3"))
    assert a != dt.rule_name("gpu-node-17.example.com", dt.DeviceRef(DRIVER, "gpu-node-17", "gpu-4"))
    long = dt.rule_name("N" * 250, dt.DeviceRef(DRIVER, "p", "Gpu_3"))
    for name in (a, long):
        assert len(name) <= 253 and DNS_SUBDOMAIN.match(name), name


@pytest.mark.parametrize(("policy", "drain", "drained", "effect"), [
    ("NoSchedule", False, False, "NoSchedule"),
    ("NoExecute", False, False, "NoExecute"),  # no drain configured: the controller-manager deletes the pods
    ("NoExecute", True, False, "NoSchedule"),  # the PDB-respecting drain first
    ("NoExecute", True, True, "NoExecute"),
    ("PreferNoSchedule", False, False, "None"),  # no device equivalent: the API's dry run
])
def test_device_effects(policy: str, drain: bool, drained: bool, effect: str) -> None:
    assert dt.device_effect(policy, drain_configured=drain, drained=drained) == effect


def test_rule_changes_apply_what_differs_and_delete_what_is_no_longer_wanted() -> None:
    device = dt.DeviceRef(DRIVER, "n1", "gpu-0")
    wanted = dt.rule_body("v1beta2", "n1", GPU0, "0", device, effect="NoSchedule")
    assert wanted["spec"] == {"deviceSelector": {"driver": DRIVER, "pool": "n1", "device": "gpu-0"},
                              "taint": {"key": TAINT_KEY, "value": "0", "effect": "NoSchedule"}}
    stale = {"metadata": {"name": "unhealthy-gpu.old"}, "spec": {}}
    changes = dt.rule_changes([stale], [wanted])
    assert changes.apply == (wanted,) and changes.delete == ("unhealthy-gpu.old",)
    assert not dt.rule_changes([wanted], [wanted])  # served as wanted: nothing to do
    raised = dt.rule_body("v1beta2", "n1", GPU0, "0", device, effect="NoExecute")
    assert dt.rule_changes([wanted], [raised]).apply == (raised,)
    assert "delete DeviceTaintRule unhealthy-gpu.old" in dt.describe(changes)


def mark(uuid: str, gpu: str, devices: tuple[dt.DeviceRef, ...] = ()) -> GpuMark:
    return GpuMark(uuid=uuid, gpu=gpu, alerts=MappingProxyType({f"fp-{gpu}": "GpuXidFatal"}),
                   since="2026-12-04T00:00:00Z", taint_effect="NoSchedule", annotate=True, devices=devices)


def test_a_gpu_under_a_device_rule_is_not_in_the_node_taint_but_still_restricts_the_node() -> None:
    device = dt.DeviceRef(DRIVER, "n1", "gpu-0")
    only_dra = Marks().with_gpu(mark(GPU0, "0", (device,)))
    assert only_dra.taint_effect is None and only_dra.restricts and only_dra.device_marks
    node = {"metadata": {"name": "n1", "resourceVersion": "7", "annotations": {}}, "spec": {"taints": []}}
    patch = node_patch(node, Marks(), only_dra)
    assert patch is not None and "spec" not in patch  # no node taint
    stored = {"metadata": {"annotations": patch["metadata"]["annotations"]}, "spec": {}}
    assert read_marks(stored) == only_dra  # the devices survive a restart
    assert json.loads(stored["metadata"]["annotations"][STATE_ANNOTATION])["gpus"][GPU0]["devices"] == [
        [DRIVER, "n1", "gpu-0"]]
    assert restricted_by_us(stored)  # the breaker counts the node

    mixed = only_dra.with_gpu(mark(GPU1, "1"))  # a GPU the slices do not publish: the node taint, for it alone
    assert mixed.taint_effect == "NoSchedule" and mixed.taint_value() == "1"


def test_policy_device_taints(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("device_taints: true\n", encoding="utf-8")
    assert load_policy(str(path)).device_taints is True
    assert load_policy(None).device_taints is False
    path.write_text("device_taints: sometimes\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="device_taints"):
        load_policy(str(path))
