"""``remediate status`` reads each node's state and why from what the remediator wrote on it."""

from __future__ import annotations

import json
from typing import Any

from exporter.remediate.nodestate import PHASE_ANNOTATION, STATE_ANNOTATION, TAINT_KEY
from exporter.remediate.status import node_status, render

STATE = json.dumps({"gpus": {"GPU-a": {"gpu": "3", "alerts": {"f": "GpuXidFatal"}, "since": "2024-05-01T11:59:00Z",
                                       "taint_effect": "NoSchedule"}},
                    "cordoned": False, "last_transition": "2024-05-01T12:00:00Z"})


def node(name: str, annotations: dict[str, str], tainted: bool = False) -> dict[str, Any]:
    taints = [{"key": TAINT_KEY, "value": "3", "effect": "NoSchedule"}] if tainted else []
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {"taints": taints}}


def test_each_state_and_why() -> None:
    untouched = node("plain", {})
    assert node_status(untouched) is None
    quarantined = node_status(node("q", {STATE_ANNOTATION: STATE}, tainted=True))
    assert quarantined is not None and (quarantined.state, quarantined.since) == ("quarantined", "2024-05-01T12:00:00Z")
    assert quarantined.why == "GPU 3 (GPU-a): GpuXidFatal since 2024-05-01T11:59:00Z"
    phase = json.dumps({"phase": "validating", "why": "Job ops/v-1 runs", "since": "2024-05-01T13:00:00Z"})
    validating = node_status(node("v", {STATE_ANNOTATION: STATE, PHASE_ANNOTATION: phase}, tainted=True))
    assert validating is not None and (validating.state, validating.since) == ("validating", "2024-05-01T13:00:00Z")
    assert validating.why.startswith("Job ops/v-1 runs [GPU 3 (GPU-a)")
    back = node_status(node("h", {STATE_ANNOTATION: json.dumps({"gpus": {}, "last_transition":
                                                                "2024-05-01T14:00:00Z"})}))
    assert back is not None and back.state == "healthy again"


def test_the_table_lists_touched_nodes_by_name() -> None:
    table = render([node("b", {STATE_ANNOTATION: STATE}, tainted=True), node("a", {STATE_ANNOTATION: STATE},
                                                                               tainted=True), node("c", {})])
    lines = table.splitlines()
    assert [line.split()[0] for line in lines] == ["NODE", "a", "b"]
    assert render([node("c", {})]) == "no node carries a mark of gpu-pod-exporter remediate"


def test_a_dra_gpu_is_quarantined_without_a_node_taint_and_named_with_its_device() -> None:
    mark = {"gpu": "3", "alerts": {"f": "GpuXidFatal"}, "since": "2024-05-01T11:59:00Z",
            "taint_effect": "NoSchedule", "devices": [["gpu.nvidia.com", "n1", "gpu-3"]]}
    state = json.dumps({"gpus": {"GPU-a": mark}, "cordoned": False, "last_transition": "2024-05-01T12:00:00Z"})
    status = node_status(node("d", {STATE_ANNOTATION: state}, tainted=False))
    assert status is not None and status.state == "quarantined"
    assert status.why == ("GPU 3 (GPU-a): GpuXidFatal since 2024-05-01T11:59:00Z, quarantined alone by "
                          "DeviceTaintRule (gpu.nvidia.com/n1/gpu-3)")
