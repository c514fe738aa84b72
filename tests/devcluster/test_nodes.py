"""Nodes files for scripts/cluster: the default set, and bad input named by file, node and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster import nodes
from devcluster.__main__ import main
from devcluster.control_plane import DATA


def test_the_default_set_has_every_provider_shape_and_kwok_annotations() -> None:
    loaded = {n["metadata"]["name"]: n for n in nodes.load(DATA / "nodes.yaml")}
    labels = {name: n["metadata"]["labels"] for name, n in loaded.items()}
    assert labels["gpu-operator"]["nvidia.com/gpu.present"] == "true"
    assert labels["nfd-vendor"]["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert "cloud.google.com/gke-accelerator" in labels["gke-gpu"]
    assert labels["aks-gpu"]["kubernetes.azure.com/accelerator"] == "nvidia"
    assert labels["aks-gpu-legacy"]["accelerator"] == "nvidia"
    assert labels["eks-karpenter-gpu"]["karpenter.k8s.aws/instance-gpu-manufacturer"] == "nvidia"
    assert loaded["gpu-tainted"]["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert loaded["control-plane"]["spec"]["taints"][0]["key"] == "node-role.kubernetes.io/control-plane"
    assert all(n["metadata"]["annotations"][nodes.KWOK_ANNOTATION] == "fake" for n in loaded.values())
    assert loaded["gpu-operator"]["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert loaded["cpu-1"]["status"]["capacity"]["cpu"] == "16"


@pytest.mark.parametrize(("text", "message"), [
    ("nodes: []\n", "non-empty list `nodes:`"),
    ("nodes:\n  - name: Bad_Name\n", "nodes[0].name: expected a lower-case DNS name"),
    ("nodes:\n  - name: a\n  - name: a\n", "nodes[1].name: a appears twice"),
    ("nodes:\n  - name: a\n    lables: {}\n", "nodes[0]: unknown key"),
    ("nodes:\n  - name: a\n    taints: [{key: x}]\n", "nodes[0].taints: expected a list of {key, value, effect}"),
    ("nodes: [\n", "not valid YAML"),
])
def test_a_bad_nodes_file_is_one_clear_error_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          text: str, message: str) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(nodes.NodesFileError) as error:
        nodes.load(path)
    assert str(error.value).startswith(f"{path}:")
    assert message in str(error.value)
    assert main(["up", "--nodes", str(path), "--state-dir", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"scripts/cluster: {path}:") and "Traceback" not in err
    assert not (tmp_path / "state").exists()  # nothing was started


def test_a_yaml_syntax_error_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("nodes:\n  - name: a\n    labels: {x: [\n", encoding="utf-8")
    with pytest.raises(nodes.NodesFileError) as error:
        nodes.load(path)
    assert str(error.value).startswith(f"{path}:4: ") or str(error.value).startswith(f"{path}:3: ")


def test_yaml_booleans_become_the_label_text_kubernetes_expects(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("nodes:\n  - name: a\n    labels: {nvidia.com/gpu.present: true}\n", encoding="utf-8")
    assert nodes.load(path)[0]["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
