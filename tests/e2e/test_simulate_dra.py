"""``gpu-pod-exporter --simulate dra-mixed``: device-plugin and DRA GPUs on one node, the whole process.

The scenario (see its comments): GPUs 0 and 1 through the device plugin, GPUs 2 and 3 through DRA
claims (GPU 3's claim used by two pods), GPU 4 in MIG mode with two DRA MIG devices whose
ResourceSlice appears 10 s after start.
"""

from __future__ import annotations

from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for

DRA_LABELS = ("dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name")


def test_mixed_node_attributes_device_plugin_and_dra_gpus_and_picks_up_the_late_slice() -> None:
    with running_exporter(["--simulate", "dra-mixed"]) as exporter:
        exporter.wait_healthy()

        def unresolved() -> dict[str, float] | None:
            found = {labels["reason"]: value
                     for labels, value in exporter.samples("gpu_pod_exporter_unresolved_devices")}
            return found if found.get("slice-missing") == 2.0 else None

        # Before the late slice: GPUs 0-3 attributed, the MIG devices counted, every GPU's metrics served.
        early = wait_for(unresolved, 20.0, "the two MIG devices waiting for their slice")
        assert sum(early.values()) == 2.0
        by_gpu = {(labels["gpu"], labels.get("GPU_I_ID")): labels
                  for labels, _ in exporter.samples("DCGM_FI_DEV_FB_USED")}
        assert len(by_gpu) == 6  # 4 whole GPUs + 2 MIG instances: no reading lost to an unresolved device
        assert {key for key, labels in by_gpu.items() if "pod" in labels} == {("0", None), ("1", None), ("2", None)}
        mig_info = [labels for labels, _ in exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO") if labels["gpu"] == "4"]
        assert mig_info == []

        def resolved() -> bool:
            return {labels["reason"]: value for labels, value in
                    exporter.samples("gpu_pod_exporter_unresolved_devices")}.get("slice-missing") == 0.0

        wait_for(resolved, 40.0, "the late ResourceSlice resolving the MIG devices")
        by_gpu = {(labels["gpu"], labels.get("GPU_I_ID")): labels
                  for labels, _ in exporter.samples("DCGM_FI_DEV_FB_USED")}
        assert (by_gpu[("0", None)]["pod"], by_gpu[("1", None)]["pod"]) == ("trainer-0", "server-0")
        assert not any(name.startswith("dra_") for name in by_gpu[("0", None)])  # device plugin: no claim
        llm = by_gpu[("2", None)]
        assert (llm["pod"], llm["team"]) == ("llm-train-0", "research")
        assert [llm[name] for name in DRA_LABELS] == ["llm-train", "ml-training", "gpu.nvidia.com", "dra-node",
                                                      "gpu-2"]
        assert "dra_mig_profile" not in llm
        assert not {"pod", "dra_claim_name"} & set(by_gpu[("3", None)])  # the shared claim: no single pod
        big = by_gpu[("4", "1")]
        assert (big["pod"], big["team"], big["dra_claim_name"], big["dra_mig_profile"]) == (
            "notebook-big-0", "data-science", "nb-big", "3g.40gb")
        assert big["dra_mig_device_uuid"].startswith("MIG-") and big["dra_device_name"] == "gpu-4-mig-3g40gb-1"
        assert (by_gpu[("4", "7")]["pod"], by_gpu[("4", "7")]["dra_mig_profile"]) == ("notebook-small-0", "1g.10gb")

        shared = sorted((labels["pod"], labels["dra_claim_name"]) for labels, _ in
                        exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO") if labels["gpu"] == "3")
        assert shared == [("eval-a-0", "shared-eval"), ("eval-b-0", "shared-eval")]
        allocated = {(labels["gpu"], labels.get("GPU_I_ID")): value
                     for labels, value in exporter.samples("DCGM_EXP_GPU_ALLOCATED")}
        assert allocated == {("0", None): 1.0, ("1", None): 1.0, ("2", None): 1.0, ("3", None): 1.0,
                             ("4", "1"): 1.0, ("4", "7"): 1.0}
        assert exporter.samples("gpu_pod_exporter_dra_resourceslices_up") == [({}, 1.0)]
        log = exporter.log()
        assert log.count("is not attributed to a GPU") == 2, log  # once per device, not once per poll
        assert "gpu-4-mig-1g10gb-7" in log
    assert exporter.process.returncode == 0
