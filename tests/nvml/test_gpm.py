"""GPM profiling: DCGM_FI_PROF_* values between two samples, call budget, and GPUs without GPM."""

from __future__ import annotations

import logging
from typing import Any

import pynvml
import pytest

from exporter.metrics.catalog import CATALOG, FromGpm
from exporter.nvml.client import NvmlClient
from exporter.nvml.gpm import GpmReader

from .fake_sampling import captured_logs, samples, sampling

OPTIONAL_PROF_ROWS = "".join(f"{name}, gauge, {name}\n" for name in (
    "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES"))
MIB = 1 << 20
KNOWN = """
gpu_defaults:
  model: H100-SXM5-80GB
  load: {pattern: steps, steps: [[0, 40], [1, 80]]}
  pcie_tx: 100MiB/s
  pcie_rx: 300MiB/s
  nvlink_tx: 2GiB/s
  profiling:
    sm_active: {pattern: steps, steps: [[0, 20], [1, 70]]}
    sm_occupancy: 25
    fp64_active: 10
"""


def test_every_prof_row_maps_to_a_gpm_metric_in_dcgm_units() -> None:
    for name, metric, scale in (
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, 0.01),
            ("DCGM_FI_PROF_SM_ACTIVE", pynvml.NVML_GPM_METRIC_SM_UTIL, 0.01),
            ("DCGM_FI_PROF_SM_OCCUPANCY", pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, 0.01),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 0.01),
            ("DCGM_FI_PROF_DRAM_ACTIVE", pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, 0.01),
            ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", pynvml.NVML_GPM_METRIC_FP64_UTIL, 0.01),
            ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", pynvml.NVML_GPM_METRIC_FP32_UTIL, 0.01),
            ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", pynvml.NVML_GPM_METRIC_FP16_UTIL, 0.01),
            ("DCGM_FI_PROF_PCIE_TX_BYTES", pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, MIB),
            ("DCGM_FI_PROF_PCIE_RX_BYTES", pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, MIB),
            ("DCGM_FI_PROF_NVLINK_TX_BYTES", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, MIB),
            ("DCGM_FI_PROF_NVLINK_RX_BYTES", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, MIB)):
        spec = CATALOG.lookup(name)
        assert spec is not None and isinstance(spec.read, FromGpm), name
        assert spec.read.metric_id == metric, name
        assert spec.read.scale == pytest.approx(scale), name


def test_ratios_and_rates_between_two_samples_match_hand_computed_values() -> None:
    with sampling(KNOWN, OPTIONAL_PROF_ROWS) as rig:
        rig.cycle(0.5)  # first GPM sample: nothing to compare with yet
        assert not any(name.startswith("DCGM_FI_PROF_") and name != "DCGM_FI_PROF_PCIE_TX_BYTES"
                       for name in rig.sampler.snapshot.devices[0].values)
        values = rig.cycle(1.5).devices[0].values
        # Half a second at 40 % and half at 80 %: the engine was active 60 % of [0.5 s, 1.5 s].
        assert values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.6)
        assert values["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx((0.5 * 20 + 0.5 * 70) / 100)
        assert values["DCGM_FI_PROF_SM_OCCUPANCY"] == pytest.approx(0.25)
        # Training mix: tensor pipes busy 70 % of the SM-active time; FP32 15 %.
        assert values["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == pytest.approx(0.45 * 0.7)
        assert values["DCGM_FI_PROF_PIPE_FP32_ACTIVE"] == pytest.approx(0.45 * 0.15)
        assert values["DCGM_FI_PROF_PIPE_FP64_ACTIVE"] == pytest.approx(0.1)
        assert values["DCGM_FI_PROF_PIPE_FP16_ACTIVE"] == pytest.approx(0.45 * 0.2)
        # DRAM follows the memory-copy utilisation (42 % of the load by default): 0.42 x 60 %.
        assert values["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(0.42 * 0.6)
        # GPM reports MiB/s; DCGM wants bytes/s (integers).
        assert values["DCGM_FI_PROF_PCIE_TX_BYTES"] == 100 * MIB
        assert values["DCGM_FI_PROF_PCIE_RX_BYTES"] == 300 * MIB
        assert values["DCGM_FI_PROF_NVLINK_TX_BYTES"] == 2048 * MIB
        assert values["DCGM_FI_PROF_NVLINK_RX_BYTES"] == 0
        assert isinstance(values["DCGM_FI_PROF_PCIE_TX_BYTES"], int)

        # 50 ms later is too soon for a new GPM sample: none is taken and the last values stay.
        taken = rig.fake.calls["nvmlGpmSampleGet"]
        assert rig.cycle(1.55).devices[0].values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.6)
        assert rig.fake.calls["nvmlGpmSampleGet"] == taken
        # 200 ms after the last sample: a new one, over [1.5 s, 1.7 s] where the load is 80 %.
        assert rig.cycle(1.7).devices[0].values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.8)
        assert rig.fake.gpm_short_intervals == 0


def test_one_sample_and_one_metrics_batch_per_gpu_per_cycle() -> None:
    with sampling("gpu_count: 2\n", OPTIONAL_PROF_ROWS) as rig:
        for second in (1.0, 2.0):
            rig.cycle(second)
        before = rig.sampler.nvml.calls_by_function()
        rig.cycle(3.0)
        after = rig.sampler.nvml.calls_by_function()
        spent = {name: after.get(name, 0) - before.get(name, 0) for name in after if name.startswith("nvmlGpm")}
        assert spent == {"nvmlGpmSampleGet": 2, "nvmlGpmMetricsGet": 2, "nvmlGpmSampleAlloc": 0,
                         "nvmlGpmQueryDeviceSupport": 0}
        assert rig.fake.calls["nvmlGpmSampleAlloc"] == 4  # two buffers per GPU, reused ever after


def test_gpus_without_gpm_omit_profiling_rows_with_a_single_warning() -> None:
    scenario = ("gpu_count: 3\ngpus:\n  0: {model: A100-SXM4-80GB}\n  1: {model: RTX-4090}\n"
                "  2: {model: H100-SXM5-80GB}\n")
    with captured_logs("gpu_pod_exporter.sampler") as logs, sampling(scenario) as rig:
        for second in (1.0, 2.0, 3.0, 4.0):
            rig.cycle(second)
        warnings = [record for record in logs.records if record.levelno >= logging.WARNING]
        gpm_warnings = [record for record in warnings if "GPM" in record.getMessage()]
        assert sorted(record.fields["gpu"] for record in gpm_warnings) == [0, 1]  # type: ignore[attr-defined]
        assert gpm_warnings[0].fields["omitted"] == (  # type: ignore[attr-defined]
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE,DCGM_FI_PROF_PIPE_TENSOR_ACTIVE,DCGM_FI_PROF_DRAM_ACTIVE")
        assert len(warnings) == 2  # nothing else warns, and nothing repeats per cycle
        assert rig.fake.calls["nvmlGpmQueryDeviceSupport"] == 3  # asked once per GPU
        assert rig.fake.calls["nvmlGpmSampleGet"] == 4  # only the H100, once per cycle

        families = rig.render()
        unsupported = {(labels["gpu"], labels["field"])
                       for labels, _ in samples(families, "gpu_pod_exporter_field_unsupported")}
        prof = {(gpu, field) for gpu, field in unsupported if field.startswith("DCGM_FI_PROF_")}
        assert prof == {(gpu, field) for gpu in ("0", "1") for field in (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE")}
        tensor = samples(families, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
        assert [labels["gpu"] for labels, _ in tensor] == ["2"]
        # Without GPM the PCIe byte rates come from the cumulative PCIe byte counters (fields 197/198).
        pcie = {labels["gpu"]: value for labels, value in samples(families, "DCGM_FI_PROF_PCIE_TX_BYTES")}
        assert set(pcie) == {"0", "1", "2"}
        assert pcie["0"] == pytest.approx(1.0e6, rel=1e-5)  # an idle GPU's simulated TX rate


def test_a_mig_gpu_keeps_interconnect_rates_on_the_parent() -> None:
    scenario = "gpu_defaults:\n  mig: [{profile: 4g.40gb, load: 60}, {profile: 3g.40gb, load: 30}]\n"
    with sampling(scenario) as rig:
        rig.cycle(1.0)
        reading = rig.cycle(2.0).devices[0]
        assert "DCGM_FI_PROF_PCIE_RX_BYTES" in reading.values
        assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in reading.values  # per instance only (flex mode)
        assert [m.identity.profile for m in reading.mig] == ["4g.40gb", "3g.40gb"]
        assert [m.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] for m in reading.mig] == pytest.approx([0.6, 0.3])
        assert all("DCGM_FI_PROF_PCIE_RX_BYTES" not in m.values for m in reading.mig)
        calls = rig.sampler.nvml.calls_by_function()
        assert calls["nvmlGpmMigSampleGet"] == 4 and calls["nvmlGpmSampleGet"] == 2


def test_the_reader_reuses_buffers_and_stops_asking_for_metrics_a_gpu_lacks(nvml_fake: Any) -> None:
    fake, clock = nvml_fake
    nvml = NvmlClient()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    reader = GpmReader()
    assert reader.probe(nvml, handle)
    graphics, nvdec = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL
    results = []
    for second in range(1, 6):
        clock.t = float(second)
        results.append(reader.read(nvml, handle, [graphics, nvdec], clock.t))
    assert results[0] == {}
    assert all(set(result) == {graphics} for result in results[1:])
    assert reader.unsupported_metrics == {(None, nvdec)}
    assert fake.calls["nvmlGpmSampleAlloc"] == 2
    assert fake.calls["nvmlGpmMetricsGet"] == 4
    reader.reset(nvml)
    assert fake.calls["nvmlGpmSampleFree"] == 2


@pytest.fixture
def nvml_fake() -> Any:
    from simulator.fakenvml import FakeNvmlLibrary  # noqa: PLC0415
    from simulator.scenario import parse_scenario  # noqa: PLC0415

    from .fake_sampling import Clock  # noqa: PLC0415

    clock = Clock()
    fake = FakeNvmlLibrary(parse_scenario("gpu_defaults: {load: 30}\n", "t.yaml", "t"), clock)
    fake.install()
    pynvml.nvmlInit()
    yield fake, clock
    pynvml.nvmlShutdown()
    fake.uninstall()


def test_a_failed_sample_restarts_the_chain_and_a_refused_one_stops_it() -> None:
    scenario = "gpu_count: 2\ngpu_defaults: {load: 50}\ngpus:\n  1: {mig: [{profile: 7g.80gb, load: 20}]}\n"
    with captured_logs("gpu_pod_exporter.sampler") as logs, sampling(scenario) as rig:
        rig.fake.inject_error("nvmlGpmSampleGet", "InvalidArgument", gpu=0, from_s=1.5, until_s=2.5)
        rig.fake.inject_error("nvmlGpmMigSampleGet", "NotSupported", gpu=1)
        values = [rig.cycle(float(second)).devices[0].values for second in (1, 2, 3, 4)]
        present = ["DCGM_FI_PROF_GR_ENGINE_ACTIVE" in cycle for cycle in values]
        assert present == [False, False, False, True]  # the chain restarts after the failed sample
        assert values[3]["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.5)
        mig = rig.sampler.snapshot.devices[1].mig
        assert [("DCGM_FI_DEV_FB_USED" in m.values, "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in m.values) for m in mig] == [
            (True, False)]  # memory still comes, GPM for the instance is refused
        assert rig.fake.calls["nvmlGpmMigSampleGet"] == 1  # refused once, never asked again
        unsupported = set(rig.sampler.snapshot.status.unsupported_fields)
        assert (1, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") in unsupported
        assert not any(gpu == 0 and name.startswith("DCGM_FI_PROF_") for gpu, name in unsupported)
        assert len(logs.messages(logging.WARNING)) == 2  # one for each problem, not one per cycle
