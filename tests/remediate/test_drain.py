"""The drain plan: which pods of a quarantined node are evicted, when, and which are never touched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from exporter.remediate.drain import DrainPolicy, describe, plan, remaining

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
GPU = ("nvidia.com/",)


def pod(namespace: str, name: str, *, owner: str | None = "ReplicaSet", gpus: int = 1, phase: str = "Running",
        labels: dict[str, str] | None = None, mirror: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": namespace, "name": name, "labels": labels or {}}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if mirror:
        metadata["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"metadata": metadata, "spec": {"containers": [{"resources": {"limits": limits}}]},
            "status": {"phase": phase}}


def actions(pods: list[dict[str, Any]], policy: DrainPolicy, known: set[tuple[str, str]] | None,
            now: datetime = T0) -> dict[str, tuple[str, str]]:
    return {f"{d.namespace}/{d.name}": (d.action, d.why)
            for d in plan(pods, policy, on_failed_gpus=known, gpu_resources=GPU, started=T0, now=now)}


def test_only_pods_on_the_failed_gpus_are_evicted_when_the_allocation_is_known() -> None:
    pods = [pod("ml", "on-failed"), pod("ml", "on-healthy-gpu")]
    got = actions(pods, DrainPolicy(mode="evict"), {("ml", "on-failed")})
    assert got["ml/on-failed"][0] == "evict"
    assert got["ml/on-healthy-gpu"] == ("skip", "not on a failed GPU")


def test_without_a_known_allocation_every_gpu_pod_of_the_node_is_a_candidate() -> None:
    got = actions([pod("ml", "gpu-user"), pod("web", "cpu-only", gpus=0)], DrainPolicy(mode="evict"), None)
    assert got == {"ml/gpu-user": ("evict", "drain mode evict (drain.mode)"),
                   "web/cpu-only": ("skip", "requests no GPU")}


def test_daemonset_mirror_finished_and_unmanaged_pods_are_never_evicted() -> None:
    pods = [pod("kube-system", "agent", owner="DaemonSet"), pod("ml", "bare", owner=None),
            pod("kube-system", "static", mirror=True), pod("ml", "done", phase="Succeeded")]
    known = {("kube-system", "agent"), ("ml", "bare"), ("kube-system", "static"), ("ml", "done")}
    got = actions(pods, DrainPolicy(mode="evict"), known)
    assert got == {"kube-system/agent": ("skip", "DaemonSet pod: never evicted"),
                   "ml/bare": ("skip", "unmanaged pod (no controller): never evicted unless drain.unmanaged_pods "
                                       "is true"),
                   "kube-system/static": ("skip", "static (mirror) pod"),
                   "ml/done": ("skip", "finished")}
    allowed = actions(pods, DrainPolicy(mode="evict", unmanaged_pods=True), known)
    assert allowed["ml/bare"][0] == "evict" and allowed["kube-system/agent"][0] == "skip"


def test_modes_per_namespace_and_per_pod_label_with_a_completion_deadline() -> None:
    policy = DrainPolicy(mode="none", deadline_s=1800,
                         namespaces=MappingProxyType({"batch": "allow-completion", "serve": "evict"}))
    pods = [pod("batch", "job-0"), pod("serve", "api-0"), pod("other", "x"),
            pod("serve", "keep-me", labels={"gpu-pod-exporter/drain": "none"})]
    known = {("batch", "job-0"), ("serve", "api-0"), ("other", "x"), ("serve", "keep-me")}
    got = actions(pods, policy, known)
    assert got["batch/job-0"] == ("wait", "allowed to complete until 2024-05-01 12:30:00 UTC (namespace batch)")
    assert got["serve/api-0"] == ("evict", "drain mode evict (namespace serve)")
    assert got["other/x"] == ("skip", "drain mode none (drain.mode)")
    assert got["serve/keep-me"] == ("skip", "drain mode none (pod label gpu-pod-exporter/drain=none)")
    later = actions(pods, policy, known, now=T0 + timedelta(minutes=30))
    assert later["batch/job-0"] == ("evict", "completion deadline passed (namespace batch)")


def test_the_plan_reads_as_one_line_and_says_what_is_left() -> None:
    decisions = plan([pod("ml", "a"), pod("ml", "b", owner="DaemonSet")], DrainPolicy(mode="evict"),
                     on_failed_gpus=None, gpu_resources=GPU, started=T0, now=T0)
    assert describe(decisions) == "ml/a: evict (drain mode evict (drain.mode)); ml/b: skip (DaemonSet pod: never " \
                                  "evicted)"
    assert [d.name for d in remaining(decisions)] == ["a"]
    assert describe([]) == "no pod on the node"
