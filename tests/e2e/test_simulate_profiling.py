"""The real exporter process in --simulate: GPM profiling metrics on H100s, and MIG per-instance series."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

Sample = tuple[dict[str, str], float]


def test_every_h100_serves_tensor_activity_in_the_default_simulation() -> None:
    with running_exporter(["--simulate", "default", "--collect-interval", "200"]) as exporter:
        exporter.wait_healthy()

        def all_eight() -> list[Sample] | None:
            found = exporter.samples("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
            return found if len({labels["gpu"] for labels, _ in found}) == 8 else None

        found = wait_for(all_eight, 20.0, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE on all 8 H100s")
        assert {labels["modelName"] for labels, _ in found} == {"NVIDIA H100 80GB HBM3"}
        tensor = {labels["gpu"]: value for labels, value in found}
        assert all(0.0 <= value <= 1.0 for value in tensor.values())
        assert tensor["0"] > 0.2  # GPU 0 trains
        assert tensor["6"] == tensor["7"] == 0.0  # idle GPUs
        engine = {labels["gpu"]: value for labels, value in exporter.samples("DCGM_FI_PROF_GR_ENGINE_ACTIVE")}
        assert all(tensor[gpu] <= engine[gpu] for gpu in tensor)
        unsupported = {labels["field"] for labels, _ in exporter.samples("gpu_pod_exporter_field_unsupported")}
        assert unsupported == {"DCGM_FI_DEV_RETIRED_PENDING"}  # page retirement predates Ampere; no PROF field


def test_mig_instances_are_series_with_gpu_instance_labels() -> None:
    with running_exporter(["--simulate", "mig-h100", "--collect-interval", "200"]) as exporter:
        exporter.wait_healthy()

        def ten_instances() -> list[Sample] | None:
            found = [(labels, value) for labels, value in exporter.samples("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
                     if "GPU_I_ID" in labels]
            return found if len(found) == 10 else None

        activity = wait_for(ten_instances, 20.0, "GR engine activity for the 10 MIG instances")
        profiles = sorted((labels["gpu"], labels["GPU_I_PROFILE"]) for labels, _ in activity)
        assert profiles == [("0", "1g.10gb")] * 7 + [("1", "1g.10gb"), ("1", "2g.20gb"), ("1", "3g.40gb")]
        used = exporter.samples("DCGM_FI_DEV_FB_USED")
        assert sorted(labels["gpu"] for labels, _ in used if "GPU_I_ID" not in labels) == ["2", "3"]
        assert sorted(labels["gpu"] for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_UTIL")) == ["2", "3"]


def test_the_node_page_shows_a_mig_gpu_with_the_cards_memory_total() -> None:
    """/gpus.json on the mig-h100 node: GPU 1 (3g.40gb + 2g.20gb + 1g.10gb) shows its instances' used memory
    out of the whole card's 79.6 GiB (DCGM_EXP_GPU_FB_TOTAL, from NVML), not out of the instances' sum."""
    with running_exporter(["--simulate", "mig-h100", "--collect-interval", "200"]) as exporter:
        exporter.wait_healthy()
        card = {labels["gpu"]: value for labels, value in exporter.samples("DCGM_EXP_GPU_FB_TOTAL")}
        assert card == {gpu: 81_559.0 for gpu in ("0", "1", "2", "3")}  # NVML's total of an H100 80GB

        def mixed_gpu() -> dict[str, Any] | None:
            gpus = json.loads(exporter.get("/gpus.json").text)["gpus"]
            gpu = next((gpu for gpu in gpus if gpu["gpu"] == 1), None)
            return gpu if gpu is not None and len(gpu["mig"]) == 3 and gpu["memory_used_mib"] else None

        gpu = wait_for(mixed_gpu, 20.0, "GPU 1 with its three MIG instances on /gpus.json")
        instances = gpu["mig"]
        assert gpu["memory_total_mib"] == 81_559.0
        assert sum(instance["memory_total_mib"] for instance in instances) < 81_559.0  # what MIG keeps is left out
        assert gpu["memory_used_mib"] == sum(instance["memory_used_mib"] for instance in instances)
