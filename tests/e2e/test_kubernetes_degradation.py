"""Kubelet restarts and API-server trouble while the exporter runs: GPU metrics go on, labels recover.

The exporter is never restarted. During an outage the last known workload labels stay (bounded in
age, five minutes by default), the self-metrics say which source is down, and the log says so
once per change of state, not once per retry.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.exporter_process import ExporterProcess, running_exporter, wait_for
from tests.e2e.kube_cluster import NodeCluster, PodSpec, node_cluster, scenario_gpus, series_for, whole_gpu

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "attribution-node.yaml"
GPUS = scenario_gpus(SCENARIO)
TRAINER = PodSpec("ml", "trainer-0", "trainer", (whole_gpu(GPUS[0]),), pids=(1001,))
SUCCESSOR = PodSpec("ml", "trainer-1", "trainer", (whole_gpu(GPUS[0]),), pids=(1001,))


@pytest.fixture
def node() -> Iterator[tuple[NodeCluster, ExporterProcess]]:
    with node_cluster() as cluster:
        cluster.add_namespace("ml", {"team": "research"})
        cluster.add_pod(TRAINER)
        with running_exporter(["--simulate", str(SCENARIO), "-c", "200", *cluster.exporter_args()]) as exporter:
            exporter.wait_healthy()
            wait_for(lambda: _gpu0(exporter).get("team") == "research", 20.0, "GPU 0 attributed with its team")
            yield cluster, exporter


def _gpu0(exporter: ExporterProcess) -> dict[str, str]:
    [(labels, _)] = series_for(exporter.samples("DCGM_FI_DEV_GPU_TEMP"), GPUS[0].uuid)
    return labels


def _value(exporter: ExporterProcess, name: str) -> float:
    [(_, value)] = exporter.samples(name)
    return value


def _log_lines(exporter: ExporterProcess, text: str) -> int:
    return sum(text in line for line in exporter.log().splitlines())


def _let_cycles_pass(exporter: ExporterProcess, cycles: int) -> None:
    """Wait (by polling) until the sampler ran ``cycles`` more times: the sources retried meanwhile."""
    start = _value(exporter, "gpu_pod_exporter_sampling_cycles_total")
    wait_for(lambda: _value(exporter, "gpu_pod_exporter_sampling_cycles_total") >= start + cycles, 20.0,
             f"{cycles} sampling cycles")


def test_kubelet_restart(node: tuple[NodeCluster, ExporterProcess]) -> None:
    cluster, exporter = node
    cluster.kubelet.stop()  # the kubelet goes down: its socket file disappears
    wait_for(lambda: _value(exporter, "gpu_pod_exporter_kubelet_up") == 0.0, 10.0, "kubelet_up 0")
    down_since = _value(exporter, "gpu_pod_exporter_kubelet_last_success_timestamp_seconds")
    _let_cycles_pass(exporter, 15)  # ~3 s: the client retried several times
    assert _gpu0(exporter)["pod"] == "trainer-0"  # last known labels, GPU metrics continue
    assert _value(exporter, "gpu_pod_exporter_kubelet_last_success_timestamp_seconds") == down_since
    assert _log_lines(exporter, "kubelet socket not found") == 1

    # While it was down, the pod was replaced; the kubelet comes back on a new socket (new inode).
    cluster.remove_pod(TRAINER)
    cluster.add_pod(SUCCESSOR)
    cluster.kubelet.start()
    wait_for(lambda: _gpu0(exporter).get("pod") == "trainer-1", 15.0, "the new pod's labels")
    assert _value(exporter, "gpu_pod_exporter_kubelet_up") == 1.0
    assert _value(exporter, "gpu_pod_exporter_kubelet_last_success_timestamp_seconds") > down_since
    assert _log_lines(exporter, "kubelet socket not found") == 1
    assert _log_lines(exporter, "kubelet PodResources up") == 2  # at start, and after the restart
    assert not [labels for labels, _ in exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO")
                if labels["pod"] == "trainer-0"]


@pytest.mark.parametrize("as_http", [False, True], ids=["410-in-watch-stream", "410-http-status"])
def test_api_server_410_gone_relists(node: tuple[NodeCluster, ExporterProcess], as_http: bool) -> None:
    cluster, exporter = node
    cluster.api.expire_history(as_http=as_http)  # every resourceVersion the exporter holds is now too old
    cluster.api.set_namespace_labels("ml", {"team": "platform"})
    wait_for(lambda: _gpu0(exporter).get("team") == "platform", 15.0, "the relisted namespace's team")
    assert _log_lines(exporter, "namespaces watch: resourceVersion expired (410 Gone); relisting") == 1
    assert _log_lines(exporter, "pods watch: resourceVersion expired (410 Gone); relisting") == 1
    assert _value(exporter, "gpu_pod_exporter_kube_api_up") == 1.0  # a relist is routine, not an outage
    assert _log_lines(exporter, "Kubernetes API up") == 1


@pytest.mark.parametrize("mode", ["refuse", "503"])
def test_api_server_outage(node: tuple[NodeCluster, ExporterProcess], mode: str) -> None:
    cluster, exporter = node
    cluster.api.set_outage(mode)
    wait_for(lambda: _value(exporter, "gpu_pod_exporter_kube_api_up") == 0.0, 15.0, "kube_api_up 0")
    down_since = _value(exporter, "gpu_pod_exporter_kube_api_last_success_timestamp_seconds")
    cluster.api.set_namespace_labels("ml", {"team": "platform"})  # changed while the exporter cannot see it
    _let_cycles_pass(exporter, 15)
    labels = _gpu0(exporter)
    assert (labels["pod"], labels["team"]) == ("trainer-0", "research")  # last known metadata is kept
    assert _value(exporter, "gpu_pod_exporter_kubelet_up") == 1.0  # the kubelet is not affected
    warnings = [line for line in exporter.log().splitlines() if " warning kube.api: " in line]
    assert len(warnings) == 1, warnings

    cluster.api.set_outage(None)
    wait_for(lambda: _gpu0(exporter).get("team") == "platform", 30.0, "the team changed during the outage")
    wait_for(lambda: _value(exporter, "gpu_pod_exporter_kube_api_up") == 1.0, 30.0, "kube_api_up 1")
    assert _value(exporter, "gpu_pod_exporter_kube_api_last_success_timestamp_seconds") > down_since
    assert _log_lines(exporter, "Kubernetes API up") == 2  # at start, and after the outage
    assert len([line for line in exporter.log().splitlines() if " warning kube.api: " in line]) == 1
