"""GPU fabric health (dcgm-exporter 4.8.4's DCGM_FI_DEV_FABRIC_HEALTH_* rows) from nvmlDeviceGetGpuFabricInfoV.

Through the sampler, pynvml's real wrapper and struct, and the fake NVML library's ``fabric`` scenario knob;
the assertions are on the /metrics text a user scrapes.
"""

from __future__ import annotations

import pynvml
import pytest

from exporter.metrics.exposition import encode_text
from simulator.fakenvml import readings

from .fake_sampling import sampling

FABRIC_ROWS = ("DCGM_FI_DEV_FABRIC_HEALTH_MASK, gauge, GPU fabric health mask.\n"
               "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, gauge, GPU fabric health summary.\n")
# GPU 0 healthy, GPU 1 with degraded bandwidth, GPU 2 unhealthy routes, GPU 3 on no NVLink fabric (NotSupported).
SCENARIO = """\
gpu_count: 4
gpus:
  0: {fabric: healthy}
  1: {fabric: degraded}
  2: {fabric: unhealthy}
"""
HEALTHY_MASK = 0x1AA  # every boolean sub-field "false" (2), incorrect configuration "none" (1): nvml.h


def _lines(text: str, name: str) -> dict[str, str]:
    """gpu label -> value of the ``name`` samples in an exposition."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            gpu = line.split('gpu="', 1)[1].split('"', 1)[0]
            found[gpu] = line.rsplit(" ", 1)[1]
    return found


def test_fabric_health_is_served_per_gpu_and_omitted_where_not_supported() -> None:
    with sampling(SCENARIO, FABRIC_ROWS) as rig:
        rig.cycle(1.0)
        snapshot = rig.cycle(2.0)
        text = encode_text(rig.render()).decode()
    assert "# TYPE DCGM_FI_DEV_FABRIC_HEALTH_MASK gauge" in text
    # The mask as NVML and DCGM give it; its sub-fields decode with NVML_GPU_FABRIC_HEALTH_GET.
    mask = {gpu: int(float(value)) for gpu, value in _lines(text, "DCGM_FI_DEV_FABRIC_HEALTH_MASK").items()}
    assert mask == {"0": HEALTHY_MASK, "1": HEALTHY_MASK - 1, "2": HEALTHY_MASK - 0x10}
    degraded = (mask["1"] >> pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW) \
        & pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW
    assert degraded == pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
    route = (mask["2"] >> pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY) \
        & pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY
    assert route == pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE
    summary = _lines(text, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY")
    assert {gpu: int(float(value)) for gpu, value in summary.items()} == {"0": 1, "1": 3, "2": 2}
    # GPU 3 is on no NVLink fabric: no series at all (never a sentinel), listed as unsupported.
    assert {(3, "DCGM_FI_DEV_FABRIC_HEALTH_MASK"), (3, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY")} <= set(
        snapshot.status.unsupported_fields)
    assert (0, "DCGM_FI_DEV_FABRIC_HEALTH_MASK") not in snapshot.status.unsupported_fields


def test_one_fabric_call_per_gpu_per_cycle_for_both_rows_and_none_after_not_supported() -> None:
    with sampling(SCENARIO, FABRIC_ROWS) as rig:
        rig.cycle(1.0)
        rig.cycle(2.0)
        before = rig.fake.calls["nvmlDeviceGetGpuFabricInfoV"]
        snapshot = rig.cycle(3.0)
        after = rig.fake.calls["nvmlDeviceGetGpuFabricInfoV"]
    # Both rows share one call; GPU 3 answered NotSupported once and is not asked again.
    assert after - before == 3
    assert snapshot.status.last_cycle_nvml_calls >= 3


def test_without_the_rows_the_fabric_is_never_asked() -> None:
    with sampling(SCENARIO) as rig:
        rig.cycle(1.0)
        rig.cycle(2.0)
        assert rig.fake.calls["nvmlDeviceGetGpuFabricInfoV"] == 0


def test_a_driver_before_the_v3_struct_serves_the_mask_without_a_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """v3 answered ArgumentVersionMismatch: v2 from then on (as DCGM), the summary left out, not 0."""
    monkeypatch.setattr(readings, "FABRIC_INFO_VERSIONS", (pynvml.nvmlGpuFabricInfo_v2,))
    with sampling(SCENARIO, FABRIC_ROWS) as rig:
        rig.cycle(1.0)
        rig.cycle(2.0)
        before = rig.fake.calls["nvmlDeviceGetGpuFabricInfoV"]
        rig.cycle(3.0)
        calls = rig.fake.calls["nvmlDeviceGetGpuFabricInfoV"] - before
        text = encode_text(rig.render()).decode()
    assert calls == 3  # the v3 attempt is not repeated every cycle
    assert set(_lines(text, "DCGM_FI_DEV_FABRIC_HEALTH_MASK")) == {"0", "1", "2"}
    assert _lines(text, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY") == {}
