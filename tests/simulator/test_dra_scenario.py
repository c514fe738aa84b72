"""A scenario's ``kubernetes.dra`` section: validation with file:line errors, what the simulated kubelet
and API server serve for it, and how ``--simulate`` turns DRA attribution on."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from exporter.cli import build_app
from exporter.config import Config, ConfigError, load_config
from exporter.metrics.counters import load_counters
from simulator.cluster_wiring import plan_simulated_cluster, scenario_devices, scenario_migs
from simulator.kube_scenario import parse_kubernetes_section, start_simulated_cluster
from simulator.scenario import load_scenario
from tests.support.polling import wait_for

SCENARIO = """\
seed: 3
gpu_count: 3
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  2: {mig: [3g.40gb, 1g.10gb]}
kubernetes:
  node: sim-dra
  dra:
    claims:
      - {name: one-gpu, namespace: ml, devices: [1]}
      - {name: one-mig, namespace: ml, devices: [{gpu: 2, mig: 1}]}
    slices:
      - {gpus: [1]}
      - {gpus: [2], appears_after_s: 0.3}
  pods:
    - name: plugin-0
      namespace: ml
      containers: [{name: main, gpus: [0]}]
    - name: dra-0
      namespace: ml
      containers: [{name: main, claims: [one-gpu, one-mig]}]
"""


def _write(tmp_path: Path, text: str = SCENARIO) -> str:
    path = tmp_path / "dra.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _planned(tmp_path: Path, *args: str, text: str = SCENARIO) -> Config:
    config = load_config(["--simulate", _write(tmp_path, text), "--address", "127.0.0.1:0", *args], {})
    planned, runner = plan_simulated_cluster(config, load_scenario(config.simulate))
    assert runner is not None
    runner.stop()
    return planned


def test_a_dra_section_turns_dra_attribution_on_unless_the_user_chose_otherwise(tmp_path: Path) -> None:
    planned = _planned(tmp_path)
    assert planned.kubernetes_enable_dra and planned.kubernetes_dra_driver_names == ("gpu.nvidia.com",)
    assert not _planned(tmp_path, "--kubernetes-enable-dra", "false").kubernetes_enable_dra


@pytest.mark.parametrize(("old", "new", "where", "message"), [
    ("claims: [one-gpu, one-mig]", "claims: [one-gpu, other]",
     "dra.yaml:21: kubernetes.pods[1].containers[0].claims[1]", "no claim 'other' in this pod's namespace"),
    ("appears_after_s: 0.3", "appears_after_s: -1", "dra.yaml:14: kubernetes.dra.slices[1].appears_after_s",
     "expected seconds >= 0"),
    ("devices: [1]}", "devices: [{gpu: 1, replica: 0}]}", "dra.yaml:10: kubernetes.dra.claims[0].devices[0]",
     "replica and resource do not apply"),
    ("  dra:\n", "  dra:\n    api_versions: [v2]\n", "dra.yaml:9: kubernetes.dra.api_versions[0]",
     "expected one of v1, v1beta2, v1beta1"),
], ids=["unknown-claim", "negative-delay", "replica", "api-version"])
def test_section_mistakes_name_file_line_and_key(tmp_path: Path, old: str, new: str, where: str,
                                                 message: str) -> None:
    assert SCENARIO.count(old) == 1
    path = _write(tmp_path, SCENARIO.replace(old, new))
    section = load_scenario(path).kubernetes
    assert section is not None
    with pytest.raises(ConfigError) as error:
        parse_kubernetes_section(section.node, section.source)
    assert where in str(error.value) and message in str(error.value)


def test_a_claimed_gpu_that_does_not_exist_is_a_scenario_error_at_start(tmp_path: Path) -> None:
    text = SCENARIO.replace("devices: [{gpu: 2, mig: 1}]", "devices: [{gpu: 2, mig: 4}]")
    with pytest.raises(ConfigError) as error:
        build_app(load_config(["--simulate", _write(tmp_path, text), "--address", "127.0.0.1:0"], {}),
                  load_counters(None))
    assert "kubernetes.dra.claims[1].devices[0].mig" in str(error.value)
    assert "GPU 2 has no MIG GPU instance 4" in str(error.value)


def _get(url: str) -> dict[str, object] | int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            answer: dict[str, object] = json.load(response)
            return answer
    except urllib.error.HTTPError as error:
        return error.code


def test_the_fakes_serve_the_claims_and_publish_the_late_slice(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path, SCENARIO.replace("  dra:\n", "  dra:\n    api_versions: [v1beta1]\n")))
    assert scenario.kubernetes is not None
    section = parse_kubernetes_section(scenario.kubernetes.node, scenario.kubernetes.source)
    devices, migs = scenario_devices(scenario), scenario_migs(scenario)
    cluster = start_simulated_cluster(section, devices, migs, tmp_path / "node")
    try:
        listed = cluster.kubelet.list_response()
        [dra_pod] = [pod for pod in listed.pod_resources if pod.name == "dra-0"]
        claimed = sorted((claim.claim_name, resource.driver_name, resource.pool_name, resource.device_name)
                         for claim in dra_pod.containers[0].dynamic_resources for resource in claim.claim_resources)
        assert claimed == [("one-gpu", "gpu.nvidia.com", "sim-dra", "gpu-1"),
                           ("one-mig", "gpu.nvidia.com", "sim-dra", "gpu-2-mig-3g40gb-1")]
        base = f"{cluster.apiserver.url}/apis/resource.k8s.io"
        assert _get(f"{base}/v1/resourceslices") == 404  # the cluster serves only v1beta1

        def published(count: int) -> list[dict[str, object]] | None:
            answer = _get(f"{base}/v1beta1/resourceslices?fieldSelector=spec.nodeName%3Dsim-dra")
            assert isinstance(answer, dict)
            items = answer["items"]
            assert isinstance(items, list)
            return items if len(items) == count else None

        first = published(1)
        assert first is not None
        assert [device["name"] for device in first[0]["spec"]["devices"]] == ["gpu-1"]
        assert first[0]["spec"]["devices"][0]["basic"]["attributes"]["uuid"] == {"string": devices[1].uuid}
        late = wait_for(lambda: published(2), 10.0, "the late slice")
        mig_devices = {device["name"]: device["basic"]["attributes"] for item in late
                       for device in item["spec"]["devices"] if device["name"] != "gpu-1"}
        by_gi = {mig.gpu_instance_id: mig for mig in migs}
        assert mig_devices["gpu-2-mig-3g40gb-1"]["uuid"] == {"string": by_gi[1].uuid}
        assert mig_devices["gpu-2-mig-3g40gb-1"]["parentUUID"] == {"string": devices[2].uuid}
        assert {attributes["profile"]["string"] for attributes in mig_devices.values()} == {"3g.40gb", "1g.10gb"}
    finally:
        cluster.stop()
