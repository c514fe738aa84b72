"""``kubernetes.faults``: a simulated node whose kubelet or API server is broken, validated with file:line."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml

from exporter.config import ConfigError
from exporter.kube.podresources import api_pb2, api_pb2_grpc
from exporter.snapshot import DeviceIdentity
from simulator.kube_faults import STRAY_POD
from simulator.kube_scenario import parse_kubernetes_section, start_simulated_cluster

GPU = DeviceIdentity(index=0, uuid="GPU-00000000-0000-0000-0000-000000000001", pci_bus_id="00000000:18:00.0",
                     minor=0, model="L4")
SECTION = "pods: [{name: p, namespace: ns, containers: [{name: c, gpus: [0]}]}]\n"


def section(faults: str) -> object:
    return yaml.compose(SECTION + f"faults: {faults}\n")


def list_pods(socket_path: str) -> api_pb2.ListPodResourcesResponse:
    with grpc.insecure_channel("unix://" + socket_path) as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
        return stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)


def test_unknown_fault_names_the_line() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_kubernetes_section(section("{kubelet: gone}"), "node.yaml")
    assert str(caught.value).startswith("node.yaml:2: kubernetes.faults.kubelet: expected one of missing,")


def test_missing_kubelet_leaves_no_socket(tmp_path: Path) -> None:
    cluster = start_simulated_cluster(parse_kubernetes_section(section("{kubelet: missing}")), [GPU], [], tmp_path)
    try:
        assert not Path(cluster.socket_path).exists() and Path(cluster.socket_path).parent.is_dir()
    finally:
        cluster.stop()


def test_stray_ids_and_wrong_socket(tmp_path: Path) -> None:
    parsed = parse_kubernetes_section(section("{stray_device_ids: [nvidia7]}"))
    cluster = start_simulated_cluster(parsed, [GPU], [], tmp_path / "a")
    try:
        pods = {(pod.namespace, pod.name): pod for pod in list_pods(cluster.socket_path).pod_resources}
        assert pods[STRAY_POD].containers[0].devices[0].device_ids == ["nvidia7"]
    finally:
        cluster.stop()
    cluster = start_simulated_cluster(parse_kubernetes_section(section("{kubelet: wrong-socket}")), [GPU], [],
                                      tmp_path / "b")
    try:
        with pytest.raises(grpc.RpcError) as caught:
            list_pods(cluster.socket_path)
        assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
    finally:
        cluster.stop()


def test_forbidden_namespaces_answer_403(tmp_path: Path) -> None:
    cluster = start_simulated_cluster(parse_kubernetes_section(section("{forbidden: [namespaces]}")), [GPU], [],
                                      tmp_path)
    try:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{cluster.apiserver.url}/api/v1/namespaces", timeout=5)
        assert caught.value.code == 403
        assert json.loads(caught.value.read())["reason"] == "Forbidden"
        with urllib.request.urlopen(f"{cluster.apiserver.url}/api/v1/pods", timeout=5) as response:
            assert response.status == 200
    finally:
        cluster.stop()
