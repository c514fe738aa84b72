"""Our marks on a Node: one taint naming every unhealthy GPU, others' taints and cordons left alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from exporter.remediate.nodestate import (
    CONDITION_TYPE,
    GPUS_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_KEY,
    GpuMark,
    Marks,
    condition_patch,
    has_gpus,
    node_patch,
    read_marks,
    restricted_by_us,
)

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
OTHER_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n", "resourceVersion": "41", "annotations": {}}, "spec": dict(spec),
            "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}, "conditions": []}}


def mark(uuid: str, gpu: str, effect: str | None = "NoSchedule", **flags: bool) -> GpuMark:
    return GpuMark(uuid, gpu, MappingProxyType({f"fp-{uuid}": "GpuXidFatal"}), "2024-05-01T11:00:00Z", effect,
                   cordon=flags.get("cordon", False), annotate=flags.get("annotate", True),
                   condition=flags.get("condition", True))


def marks(*gpus: GpuMark, cordoned: bool = False) -> Marks:
    return Marks(MappingProxyType({m.uuid: m for m in gpus}), cordoned_by_us=cordoned, last_transition=NOW)


def test_one_taint_names_every_unhealthy_gpu_with_the_strongest_effect() -> None:
    desired = marks(mark("GPU-b", "10"), mark("GPU-a", "3", "PreferNoSchedule"), mark("GPU-c", "0", None))
    patch = node_patch(node(taints=[OTHER_TAINT]), Marks(), desired)
    assert patch is not None
    assert patch["spec"]["taints"] == [OTHER_TAINT, {"key": TAINT_KEY, "value": "3_10", "effect": "NoSchedule"}]
    assert patch["metadata"]["resourceVersion"] == "41"  # precondition: 409 if the node changed meanwhile
    assert patch["metadata"]["annotations"][GPUS_ANNOTATION] == "GPU-a,GPU-b,GPU-c"
    state = json.loads(patch["metadata"]["annotations"][STATE_ANNOTATION])
    assert state["gpus"]["GPU-a"]["alerts"] == {"fp-GPU-a": "GpuXidFatal"}
    assert state["last_transition"] == "2024-05-01T12:00:00Z"


def test_reading_back_what_was_written_gives_the_same_marks() -> None:
    desired = marks(mark("GPU-a", "3", cordon=True), cordoned=True)
    obj = node()
    patch = node_patch(obj, Marks(), desired)
    assert patch is not None
    obj["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    obj["spec"].update(patch["spec"])
    assert read_marks(obj) == desired
    assert restricted_by_us(obj)
    assert node_patch(obj, desired, desired) is None  # nothing to change: no request at all


def test_an_unreadable_state_annotation_counts_as_no_marks() -> None:
    obj = node()
    obj["metadata"]["annotations"][STATE_ANNOTATION] = "{not json"
    assert read_marks(obj) == Marks()


def test_clearing_removes_only_our_taint_and_our_annotation() -> None:
    current = marks(mark("GPU-a", "3"))
    obj = node(taints=[OTHER_TAINT, {"key": TAINT_KEY, "value": "3", "effect": "NoSchedule"}])
    obj["metadata"]["annotations"][GPUS_ANNOTATION] = "GPU-a"
    patch = node_patch(obj, current, Marks(last_transition=NOW))
    assert patch is not None
    assert patch["spec"]["taints"] == [OTHER_TAINT]
    assert patch["metadata"]["annotations"][GPUS_ANNOTATION] is None  # null deletes it
    assert json.loads(patch["metadata"]["annotations"][STATE_ANNOTATION])["gpus"] == {}  # the time stays


def test_an_administrators_cordon_is_never_lifted() -> None:
    cordoned_by_admin = node(unschedulable=True)
    patch = node_patch(cordoned_by_admin, marks(mark("GPU-a", "3")), Marks(last_transition=NOW))
    assert patch is not None and "unschedulable" not in patch.get("spec", {})
    ours = node(unschedulable=True)
    patch = node_patch(ours, marks(mark("GPU-a", "3", None, cordon=True), cordoned=True), Marks(last_transition=NOW))
    assert patch is not None and patch["spec"]["unschedulable"] is False


def test_the_condition_says_why_and_is_set_false_when_cleared() -> None:
    obj = node()
    patch = condition_patch(obj, marks(mark("GPU-a", "3")), NOW)
    assert patch is not None
    [condition] = patch["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (CONDITION_TYPE, "True", "GpuXidFatal")
    assert "GPU 3 (GPU-a): GpuXidFatal" in condition["message"]
    obj["status"]["conditions"] = [condition]
    assert condition_patch(obj, marks(mark("GPU-a", "3")), NOW) is None  # already says so
    [cleared] = condition_patch(obj, Marks(), NOW)["status"]["conditions"]  # type: ignore[index]
    assert (cleared["status"], cleared["reason"]) == ("False", "GpusHealthy")
    assert condition_patch(node(), Marks(), NOW) is None  # never set: nothing to clear


def test_gpu_nodes_are_the_ones_with_gpu_resources() -> None:
    assert has_gpus(node(), ("nvidia.com/",))
    cpu_only = node()
    cpu_only["status"]["allocatable"] = {"cpu": "8", "nvidia.com/gpu": "0"}
    assert not has_gpus(cpu_only, ("nvidia.com/",))
    assert not has_gpus(node(), ("amd.com/",))
