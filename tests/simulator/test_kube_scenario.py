"""The scenario's kubernetes: section: validation with file:line errors, and the cluster it starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.composition import kubernetes_settings
from exporter.config import Config, ConfigError
from exporter.kube.attribution import KubernetesAttribution
from exporter.kube.metadata import WatchTimeouts
from exporter.kube.processes import CgroupIdentity, parse_cgroup_file
from exporter.snapshot import DeviceIdentity, GpuProcess, MigIdentity
from simulator.kube_scenario import (
    GpuRef,
    KubernetesScenario,
    ScenarioContainer,
    ScenarioPod,
    cgroup_path,
    container_id,
    default_kubernetes_section,
    device_id,
    load_kubernetes_section,
    parse_kubernetes_section,
    start_simulated_cluster,
)
from tests.kube.helpers import poll

GPUS = (
    DeviceIdentity(
        0, "GPU-00000000-1111-2222-3333-444444444444", "00000000:18:00.0", 0, "NVIDIA H100 80GB HBM3"
    ),
    DeviceIdentity(
        1, "GPU-11111111-1111-2222-3333-444444444444", "00000000:2A:00.0", 1, "NVIDIA H100 80GB HBM3"
    ),
    DeviceIdentity(
        2, "GPU-22222222-1111-2222-3333-444444444444", "00000000:3B:00.0", 3, "NVIDIA A100-SXM4-80GB"
    ),
)

MIGS = (MigIdentity(GPUS[2].uuid, "MIG-33333333-1111-2222-3333-444444444444", 3, 0, "3g.40gb"),)

EXAMPLE = """\
devices: 3                        # (the rest of a scenario belongs to the scenario loader)
kubernetes:
  node: gpu-node-7
  namespaces:
    - name: ml-training
      labels: {team: research}
  pods:
    - name: trainer-0
      namespace: ml-training
      labels: {app: trainer}
      containers:
        - name: log-shipper
          sidecar: true
        - name: trainer
          gpus: [0]
          pids: [4242]
    - name: inference-0
      namespace: serving
      qos: guaranteed
      containers:
        - name: server
          gpus:
            - {gpu: 1, replica: 0}
            - {gpu: 2, mig: 3}
          pids: [5151]
"""


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def test_example_parses(tmp_path: Path) -> None:
    section = load_kubernetes_section(_scenario(tmp_path, EXAMPLE))
    assert section is not None
    assert section.node == "gpu-node-7" and section.gpu_id_type == "uid" and section.runtime == "containerd"
    assert [ns.name for ns in section.namespaces] == ["ml-training", "serving"]  # serving created bare
    trainer = section.pods[0]
    assert [(c.name, c.sidecar, c.gpus and c.gpus[0].gpu, c.pids) for c in trainer.containers] == [
        ("log-shipper", True, (), ()),
        ("trainer", False, 0, (4242,)),
    ]
    server = section.pods[1].containers[0]
    assert [(ref.gpu, ref.mig, ref.replica) for ref in server.gpus] == [(1, None, 0), (2, 3, None)]
    assert section.pods[1].qos == "guaranteed"
    assert section.pods[0].uid != section.pods[1].uid


def test_plain_data_from_a_loader_is_accepted() -> None:
    raw = yaml.safe_load(EXAMPLE)["kubernetes"]
    assert parse_kubernetes_section(raw, "scenario.yaml") == parse_kubernetes_section(
        yaml.compose(EXAMPLE).value[1][1], "scenario.yaml"
    )
    assert parse_kubernetes_section(None) == KubernetesScenario()


@pytest.mark.parametrize(
    ("snippet", "line", "key", "message"),
    [
        ("  nodes: x\n", 2, "kubernetes.nodes", "unknown key"),
        ("  gpu_id_type: index\n", 2, "kubernetes.gpu_id_type", "expected one of uid, device-name"),
        ("  cgroup_version: 3\n", 2, "kubernetes.cgroup_version", "expected one of 1, 2"),
        (
            "  pods:\n    - namespace: a\n      containers: [{name: c}]\n",
            3,
            "kubernetes.pods[0].name",
            "missing",
        ),
        (
            "  pods:\n    - name: p\n      containers: []\n",
            3,
            "kubernetes.pods[0].containers",
            "at least one",
        ),
        (
            "  pods:\n    - name: p\n      containers:\n        - name: c\n          gpus: [zero]\n",
            6,
            "kubernetes.pods[0].containers[0].gpus[0]",
            "expected an integer",
        ),
        (
            "  pods:\n    - name: p\n      containers:\n        - name: c\n          gpus: [{mig: 1}]\n",
            6,
            "kubernetes.pods[0].containers[0].gpus[0].gpu",
            "missing",
        ),
        (
            "  pods:\n    - name: p\n      containers:\n        - name: c\n"
            "          gpus: [{gpu: 0, mig: -1}]\n",
            6,
            "kubernetes.pods[0].containers[0].gpus[0].mig",
            "expected an integer >= 0",
        ),
        (
            "  pods:\n    - name: p\n      labels: {team: 7}\n      containers: [{name: c}]\n",
            4,
            "kubernetes.pods[0].labels.team",
            "label values must be strings",
        ),
        (
            "  pods:\n    - name: p\n      containers: [{name: c, pids: [1]}, {name: d, pids: [1]}]\n",
            4,
            "kubernetes.pods[0].containers[1].pids[0]",
            "PID 1 is already used",
        ),
        (
            "  pods:\n    - name: p\n      containers: [{name: c}, {name: c}]\n",
            4,
            "kubernetes.pods[0].containers[1].name",
            "duplicate container",
        ),
        (
            "  pods:\n    - {name: p, containers: [{name: c}]}\n    - {name: p, containers: [{name: c}]}\n",
            4,
            "kubernetes.pods[1].name",
            "duplicate pod default/p",
        ),
        ("  namespaces: {ml: {}}\n", 2, "kubernetes.namespaces", "expected a list"),
        (
            "  pods:\n    - name: Bad_Name\n      containers: [{name: c}]\n",
            3,
            "kubernetes.pods[0].name",
            "expected a pod name",
        ),
    ],
)
def test_mistakes_name_file_line_and_key(
    tmp_path: Path, snippet: str, line: int, key: str, message: str
) -> None:
    path = _scenario(tmp_path, "kubernetes:\n" + snippet)
    with pytest.raises(ConfigError) as failure:
        load_kubernetes_section(path)
    error = failure.value
    assert error.source == f"{path}:{line}"
    assert error.key == key
    assert message in error.message
    assert str(error).startswith(f"{path}:{line}: {key}: ")


def test_invalid_yaml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_kubernetes_section(_scenario(tmp_path, "kubernetes:\n  pods: [\n"))
    assert load_kubernetes_section(_scenario(tmp_path, "devices: 2\n")) is None


def test_references_to_missing_gpus_fail_at_their_line(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path,
        "kubernetes:\n  pods:\n    - name: p\n      containers:\n        - name: c\n"
        "          gpus: [{gpu: 9}]\n",
    )
    section = load_kubernetes_section(path)
    assert section is not None
    with pytest.raises(ConfigError) as failure:
        start_simulated_cluster(section, GPUS, MIGS, tmp_path / "cluster")
    assert failure.value.source == f"{path}:6"
    assert "GPU 9 does not exist (simulated GPUs: 0, 1, 2)" in failure.value.message
    with pytest.raises(ConfigError, match="no MIG GPU instance 5"):
        device_id(GpuRef(2, mig=5, where="x:1"), GPUS, MIGS, "uid")


def test_device_ids_in_both_naming_schemes() -> None:
    assert device_id(GpuRef(0), GPUS, MIGS, "uid") == ("nvidia.com/gpu", GPUS[0].uuid)
    assert device_id(GpuRef(1, replica=4), GPUS, MIGS, "uid") == (
        "nvidia.com/gpu.shared",
        f"{GPUS[1].uuid}::4",
    )
    assert device_id(GpuRef(2, mig=3), GPUS, MIGS, "uid") == ("nvidia.com/mig-3g.40gb", MIGS[0].uuid)
    assert device_id(GpuRef(2, mig=3), GPUS, MIGS, "device-name") == ("nvidia.com/mig-3g.40gb", "nvidia3/gi3")
    assert device_id(GpuRef(1, replica=1), GPUS, MIGS, "device-name")[1] == "nvidia1/vgpu1"
    assert device_id(GpuRef(0, resource="nvidia.com/a100"), GPUS, MIGS, "uid")[0] == "nvidia.com/a100"


@pytest.mark.parametrize("runtime", ["containerd", "cri-o", "docker"])
@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
def test_written_cgroup_paths_parse_back(runtime: str, driver: str, qos: str) -> None:
    pod = ScenarioPod(
        "ns", "p", "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", qos=qos, containers=(ScenarioContainer("c"),)
    )
    cid = container_id(pod.uid, "c")
    path = cgroup_path(KubernetesScenario(runtime=runtime, cgroup_driver=driver), pod, cid)
    assert parse_cgroup_file(f"0::{path}\n") == CgroupIdentity(pod.uid, cid)


@pytest.mark.parametrize("id_type", ["uid", "device-name"])
@pytest.mark.parametrize("cgroup_version", [1, 2])
def test_simulated_cluster_feeds_the_real_attribution(
    tmp_path: Path, id_type: str, cgroup_version: int
) -> None:
    section = load_kubernetes_section(
        _scenario(
            tmp_path,
            EXAMPLE.replace(
                "  node: gpu-node-7\n",
                f"  node: gpu-node-7\n  gpu_id_type: {id_type}\n"
                f"  cgroup_version: {cgroup_version}\n  host_pids: [31337]\n",
            ),
        )
    )
    assert section is not None
    # A deep work directory: the socket must still fit in a unix socket path.
    cluster = start_simulated_cluster(section, GPUS, MIGS, tmp_path / ("deep" * 20) / "cluster")
    attribution = KubernetesAttribution(
        kubernetes_settings(
                Config(pod_resources_interval_ms=50, process_attribution=True, **cluster.config_overrides())),  # type: ignore[arg-type]
        watch_timeouts=WatchTimeouts(backoff_initial_s=0.02, backoff_max_s=0.1),
    )
    try:
        assert len(cluster.socket_path) <= 100
        attribution.start()
        snapshot = poll(
            lambda: (
                (s := attribution.snapshot(GPUS, MIGS)).allocation(GPUS[0].uuid)
                and s.status.api_up
                and attribution.metadata.synced
                and s
            )
        )
        trainer = snapshot.allocation(GPUS[0].uuid)
        assert trainer is not None
        assert (
            trainer.holders[0].workload.team == "research" and trainer.holders[0].workload.pod == "trainer-0"
        )
        # One container through a time-slicing replica: its only holder, so not shared (it gets the labels).
        replica = snapshot.allocation(GPUS[1].uuid)
        assert replica is not None and not replica.shared and replica.holders[0].replica_ids == ("0",)
        mig = snapshot.allocation(GPUS[2].uuid, 3)
        assert mig is not None and mig.holders[0].workload.namespace == "serving"

        attribution.update_processes({GPUS[0].uuid: [GpuProcess(4242, 1 << 30), GpuProcess(31337, 1 << 20)]})
        snapshot = attribution.snapshot(GPUS, MIGS)
        assert [(m.workload.container, m.used_bytes) for m in snapshot.memory(GPUS[0].uuid)] == [
            ("trainer", 1 << 30)
        ]
        assert sum(snapshot.unattributed_bytes.values()) == 1 << 20
    finally:
        attribution.stop()
        cluster.stop()
    assert not Path(cluster.socket_path).exists()


def test_default_section_covers_every_case(tmp_path: Path) -> None:
    section = default_kubernetes_section(GPUS, MIGS)
    cluster = start_simulated_cluster(section, GPUS, MIGS, tmp_path)
    try:
        pods = {pod.name: pod for pod in cluster.kubelet.pods()}
        assert set(pods) == {"trainer-0", "llm-server-0", "embedder-0", "notebook-0"}
        assert pods["notebook-0"].containers[0].devices == (("nvidia.com/mig-3g.40gb", MIGS[0].uuid),)
        assert [ns for ns, _ in cluster.apiserver.pod_names()] == [
            "inference",
            "inference",
            "ml-training",
            "research",
        ]
        assert (Path(cluster.proc_root) / "31337" / "cgroup").exists()
    finally:
        cluster.stop()
    assert default_kubernetes_section(GPUS[:1], ()).pods[0].name == "trainer-0"
