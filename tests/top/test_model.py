"""What `top` lists: rows from node views, busiest first, idle marked, filters as a user types them."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.conditions import CounterHistory
from exporter.top.model import Filters, NodeView, screen
from exporter.web.nodeview import build_view


def gpu(index: int, util: float | None, containers: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"gpu": index, "model": "NVIDIA H100", "uuid": f"GPU-{index}", "utilization_percent": util,
            "memory_used_mib": 1024.0 * index, "memory_total_mib": 81920.0, "temperature_c": 50.0, "power_w": 300.0,
            "up": True, "healthy": True, "health_reason": "ok", "containers": containers or [], "mig": [], **extra}


def container(pod: str, namespace: str = "ml", team: str = "vision", sm: float | None = None,
              instance: int | None = None) -> dict[str, Any]:
    return {"namespace": namespace, "pod": pod, "container": "main", "team": team, "gpu_instance_id": instance,
            "sm_util_percent": sm, "memory_used_mib": None}


NODES = [
    NodeView("east", "node-a", {"gpus": [
        gpu(0, 90.0, [container("a-0", sm=60.0), container("b-0", namespace="research", team="physics", sm=2.0)]),
        gpu(1, 1.0, [container("idle-0")]),
        gpu(2, 0.0),
        gpu(3, None, up=False, healthy=False, health_reason="gpu_lost"),
    ]}),
    NodeView("west", "node-b", {"gpus": [gpu(0, 40.0, [container("solo-0", namespace="research", team="physics")])]}),
]


def test_gpus_are_busiest_first_and_an_allocated_gpu_below_the_threshold_is_idle() -> None:
    shown = screen(NODES, Filters())
    assert [(row.cluster, row.gpu) for row in shown.gpus] == [("east", 0), ("west", 0), ("east", 1), ("east", 2),
                                                               ("east", 3)]
    assert [row.idle for row in shown.gpus] == [False, False, True, False, False]  # a free GPU is not idle
    lost = shown.gpus[-1]
    assert (lost.healthy, lost.health_reason, lost.util_percent) == (False, "gpu_lost", None)
    assert shown.clusters == ("east", "west")


def test_pods_show_their_own_use_on_a_shared_gpu_and_the_gpus_when_alone() -> None:
    """Idle as the alerts say it: a GPU held alone below 5 % (GpuAllocatedButIdle); a share of a time-shared
    GPU below 1 % (GpuSharedShareIdle), so b-0 using 2 % of a shared GPU is not idle: no alert says so."""
    pods = screen(NODES, Filters()).pods
    assert [(pod.pod, pod.util_percent, pod.idle) for pod in pods] == [
        ("a-0", 60.0, False), ("solo-0", 40.0, False), ("b-0", 2.0, False), ("idle-0", 1.0, True)]
    shared = NodeView("", "n", {"gpus": [gpu(0, 50.0, [container("busy-0", sm=50.0), container("standby-0", sm=0.5)])]})
    assert [(pod.pod, pod.idle) for pod in screen([shared], Filters()).pods] == [("busy-0", False), ("standby-0", True)]


def test_a_pod_alone_on_an_idle_mig_instance_is_idle_with_the_instances_activity() -> None:
    """alert-zoo's GPU 8: the 2g.20gb instance 3 is idle (GpuAllocatedButIdle names it); its pod's row shows
    the instance's engine activity and IDLE, not "-"."""
    view = {"gpus": [gpu(8, 43.0, [container("mig-trainer-0", instance=1), container("mig-notebook-0", instance=3)],
                         mig=[{"gpu_instance_id": 1, "profile": "3g.40gb", "engine_active_percent": 72.0},
                              {"gpu_instance_id": 3, "profile": "2g.20gb", "engine_active_percent": 0.0}])]}
    pods = screen([NodeView("", "n", view)], Filters()).pods
    assert [(pod.pod, pod.gpu, pod.util_percent, pod.idle) for pod in pods] == [
        ("mig-trainer-0", "8/MIG 1", 72.0, False), ("mig-notebook-0", "8/MIG 3", 0.0, True)]


def test_filters_narrow_gpus_to_those_a_matching_pod_holds() -> None:
    shown = screen(NODES, Filters.parse("team=physics"))
    assert [(row.cluster, row.gpu) for row in shown.gpus] == [("east", 0), ("west", 0)]
    assert [pod.pod for pod in shown.pods] == ["solo-0", "b-0"]
    shown = screen(NODES, Filters.parse("cluster=west namespace=research"))
    assert [pod.pod for pod in shown.pods] == ["solo-0"] and len(shown.gpus) == 1
    assert [row.gpu for row in screen(NODES, Filters.parse("node=node-a"), sort="name").gpus] == [0, 1, 2, 3]
    assert [row.gpu for row in screen(NODES, Filters(), sort="memory").gpus][:2] == [3, 2]


def test_a_mistyped_filter_names_the_term_and_the_keys() -> None:
    with pytest.raises(ValueError, match="filter 'pod=x': use KEY=VALUE with KEY one of cluster, node, namespace"):
        Filters.parse("pod=x")
    assert Filters.parse("team= namespace=a").describe() == "namespace=a"


def test_a_mig_gpu_uses_its_instances_activity_weighted_by_their_size() -> None:
    """The node view's utilisation of a MIG GPU (a 3g instance weighs three 1g ones), not a plain mean."""
    base = {"gpu": "0", "UUID": "GPU-0", "Hostname": "n"}
    big, small = ({**base, "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "1"},
                  {**base, "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "2"})
    view = build_view([("DCGM_FI_PROF_GR_ENGINE_ACTIVE", big, 0.8), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", small, 0.2),
                       ("DCGM_EXP_GPU_ALLOCATION_INFO", {**big, "namespace": "ml", "pod": "m-0", "container": "c"},
                        1.0)], history=CounterHistory())
    row = screen([NodeView("", "n", view)], Filters()).gpus[0]
    assert row.util_percent == 65.0  # (3 * 80 + 1 * 20) / 4; the unweighted mean would say 50
    assert row.pods[0].gpu == "0/MIG 1" and row.pods[0].util_percent == 80.0  # its instance's activity


def test_a_row_carries_every_condition_of_its_gpu_from_the_view() -> None:
    base = {"gpu": "0", "UUID": "GPU-0", "Hostname": "n"}
    held = {**base, "namespace": "ml", "pod": "nb-0", "container": "c"}
    view = build_view([("DCGM_FI_DEV_GPU_UTIL", held, 3.0), ("DCGM_EXP_GPU_ALLOCATED", base, 1.0),
                       ("DCGM_EXP_GPU_ALLOCATION_INFO", held, 1.0), ("DCGM_FI_DEV_GPU_TEMP", held, 90.0),
                       ("DCGM_FI_DEV_SLOWDOWN_TEMP", held, 91.0)], history=CounterHistory())
    row = screen([NodeView("", "n", view)], Filters()).gpus[0]
    assert row.idle  # allocated and below IDLE_BELOW_PERCENT, the alert's threshold
    assert [(cond.alert, cond.severity) for cond in row.conditions] == [
        ("GpuTemperatureNearSlowdown", "critical"), ("GpuTemperatureHigh", "warning"),
        ("GpuAllocatedButIdle", "warning")]
    assert row.conditions[-1].text == "allocated, utilisation 3 % (idle below 5 %)"
