"""Pod, namespace and container names and label values that try to break the exposition format.

Kubernetes restricts names (DNS labels) and label values (63 characters), but the exporter must not
rely on what an API server in front of it validated: it gets strings from JSON and from protobuf.
The fake kubelet and API server carry whatever the test gives them. Every value below goes
through pod, namespace and container names, a pod label (copied with ``--kubernetes-enable-pod-labels``)
and the namespace label that becomes ``team``, then through both exposition formats. The
exposition must stay valid (prometheus-client's parsers and ``promtool check metrics`` accept it,
with only the documented dcgm-exporter naming findings), every value must come back exactly, and
no value may smuggle in a sample of its own.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from exporter.kube.labels import MAX_POD_LABEL_VALUE_LENGTH
from tests.e2e.test_simulator import CONTRACT_FINDINGS
from tests.support.exporter_process import ExporterProcess, parse_samples, running_exporter
from tests.support.kube_cluster import NodeCluster, PodSpec, node_cluster, scenario_gpus, whole_gpu
from tests.support.polling import wait_for
from tests.support.programs import require_program

pytestmark = pytest.mark.e2e

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "attribution-node.yaml"
GPUS = scenario_gpus(SCENARIO)
GPU_PIDS = {0: 1001, 1: 1101, 2: 2001, 3: 3001}  # the scenario's GPU processes, put into the pods below

# One hostile value per GPU (0-4). Names carry them with a prefix; the pod label and the team as they are.
HOSTILE = (
    ("quotes", 'say "hi" to ""'),
    ("backslashes", "C:\\new\\table\\"),  # a backslash before "n" is not a newline; a trailing one escapes nothing
    ("newlines", 'one\ntwo\n# TYPE DCGM_FI_DEV_GPU_TEMP counter\nDCGM_FI_DEV_GPU_TEMP{gpu="99"} 1\n'),
    ("unicode", "チーム-Ω-🚀-é\u200b\u202e-\r\t\x00-\u2028-\x85"),
    ("10 KB", ('ß "q" \\ \n 🚀 } ' * 1024)[:10240]),
)
# A lone surrogate has no UTF-8 form: JSON can carry it ("\ud800"), protobuf cannot, so only label
# values from the API can hold one. It is written as U+FFFD, as Go's encoders do.
SURROGATE_GPU = 5
SURROGATE = "bad\ud800team"
SURROGATE_WRITTEN = "bad\ufffdteam"


def _pod(index: int, value: str) -> PodSpec:
    pids = (GPU_PIDS[index],) if index in GPU_PIDS else ()
    return PodSpec(f"n{index}-{value}", f"p{index}-{value}", f"c{index}-{value}", (whole_gpu(GPUS[index]),),
                   pids=pids, labels=(("app", value),))


PODS = [_pod(index, value) for index, (_, value) in enumerate(HOSTILE)]
PLAIN_POD = PodSpec("plain", "plain-pod", "main", (whole_gpu(GPUS[SURROGATE_GPU]),), labels=(("app", SURROGATE),))


def expected_workload(gpu: int) -> dict[str, str]:
    """The workload labels GPU ``gpu``'s series must carry, decoded."""
    if gpu == SURROGATE_GPU:
        return {"container": "main", "namespace": "plain", "pod": "plain-pod", "pod_uid": PLAIN_POD.uid,
                "team": SURROGATE_WRITTEN, "app": SURROGATE_WRITTEN}
    pod, value = PODS[gpu], HOSTILE[gpu][1]
    labels = {"container": pod.container, "namespace": pod.namespace, "pod": pod.name, "pod_uid": pod.uid,
              "team": value}
    if len(value) <= MAX_POD_LABEL_VALUE_LENGTH:  # longer pod-label values are not copied (documented bound)
        labels["app"] = value
    return labels


WORKLOAD_KEYS = ("container", "namespace", "pod", "pod_uid", "team", "app")


def workload_of(labels: dict[str, str]) -> dict[str, str]:
    return {key: labels[key] for key in WORKLOAD_KEYS if key in labels}


@pytest.fixture
def node() -> Iterator[tuple[NodeCluster, ExporterProcess]]:
    with node_cluster() as cluster:
        for pod, (_, value) in zip(PODS, HOSTILE, strict=True):
            cluster.add_namespace(pod.namespace, {"team": value})
            cluster.add_pod(pod)
        cluster.add_namespace("plain", {"team": SURROGATE})
        cluster.add_pod(PLAIN_POD)
        args = ["--simulate", str(SCENARIO), "-c", "200", *cluster.exporter_args(process_attribution=True),
                "--kubernetes-enable-pod-uid",
                "--kubernetes-enable-pod-labels", "--kubernetes-pod-label-allowlist-regex", "^app$"]
        with running_exporter(args) as exporter:
            exporter.wait_healthy()
            yield cluster, exporter


def test_hostile_pod_and_namespace_names_and_label_values(node: tuple[NodeCluster, ExporterProcess]) -> None:
    cluster, exporter = node
    wanted = {str(gpu): expected_workload(gpu) for gpu in range(len(GPUS))}

    def attributed() -> str | None:
        exporter.assert_running()
        text = exporter.metrics()
        samples = parse_samples(text)
        temperatures = {labels["gpu"]: workload_of(labels) for name, labels, _ in samples
                        if name == "DCGM_FI_DEV_GPU_TEMP"}
        # Container memory comes from the process attribution, which may land a cycle after the labels.
        holders = {labels["gpu"]: workload_of(labels) for name, labels, _ in samples
                   if name == "DCGM_EXP_CONTAINER_FB_USED"}
        return text if temperatures == wanted and holders == wanted else None

    text = wait_for(attributed, 30.0, "every GPU and its container memory attributed with its hostile names")
    samples = parse_samples(text)

    # Nothing was injected: one temperature per GPU, no gpu="99", and the other families agree.
    assert sorted(labels["gpu"] for name, labels, _ in samples if name == "DCGM_FI_DEV_GPU_TEMP") == \
        [str(gpu) for gpu in range(len(GPUS))]
    assert not [labels for _, labels, _ in samples if labels.get("gpu") == "99"]
    info = {labels["gpu"]: workload_of(labels) for name, labels, _ in samples if name == "DCGM_EXP_GPU_ALLOCATION_INFO"}
    assert info == wanted
    memory = {labels["gpu"]: (workload_of(labels), value) for name, labels, value in samples
              if name == "DCGM_EXP_CONTAINER_FB_USED"}
    assert {gpu: labels for gpu, (labels, _) in memory.items()} == wanted  # holders, with or without processes
    assert sorted(gpu for gpu, (_, used) in memory.items() if used > 0) == [str(gpu) for gpu in GPU_PIDS]

    # OpenMetrics, through the library's strict parser, carries the same values.
    openmetrics = exporter.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert openmetrics.headers["Content-Type"].startswith("application/openmetrics-text")
    om_temperatures = {sample.labels["gpu"]: workload_of(dict(sample.labels))
                       for family in parse_openmetrics(openmetrics.text) for sample in family.samples
                       if sample.name == "DCGM_FI_DEV_GPU_TEMP"}
    assert om_temperatures == wanted

    # promtool reads the text format as Prometheus does: only the naming contract's findings.
    promtool = require_program("promtool")
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode("utf-8"), capture_output=True,
                            timeout=60, check=False)
    findings = [line for line in (result.stdout + result.stderr).decode("utf-8", "replace").split("\n")
                if line.strip()]
    assert [line for line in findings if not (line.startswith("DCGM_") and line.endswith(CONTRACT_FINDINGS))] == []

    # The values can change like any other: the renderer is alive and nothing is stuck on the old ones.
    cluster.api.set_namespace_labels("plain", {"team": "plain-team"})
    wait_for(lambda: any(name == "DCGM_FI_DEV_GPU_TEMP" and labels.get("team") == "plain-team"
                         for name, labels, _ in parse_samples(exporter.metrics())), 15.0, "the new team value")
    assert exporter.get("/health").status == 200
    log = exporter.log()
    assert "Traceback" not in log and "rendering failed" not in log, log
    # The sampler's overrun line says the machine is busy (a loaded test machine), not that a name broke anything.
    overrun = "a sampling cycle took longer than the collect interval"
    assert not [line for line in log.split("\n") if (" warning " in line or " error " in line) and overrun not in line]
