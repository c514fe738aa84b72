"""dcgm-exporter 1.x compatibility: its 1.x metric names load, and -o gives the 1.x label names."""

from __future__ import annotations

from pathlib import Path

from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube.attribution import Workload
from exporter.kube.series import workload_labels
from exporter.metrics.catalog import CATALOG
from exporter.metrics.counters import load_counters
from exporter.metrics.legacy_names import ONE_X_FIELD_IDS
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.snapshot import DeviceIdentity, DeviceReading, SamplerStatus, Snapshot

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter-4.8-1.x-compatibility-metrics.csv"
GPU = DeviceIdentity(index=0, uuid="GPU-aaaa", pci_bus_id="00000000:8D:00.0", minor=0, model="NVIDIA H100")


def test_dcgm_exporters_1x_file_loads_and_keeps_its_metric_names() -> None:
    counters = load_counters(str(FIXTURE))
    names = {row.name: row.spec.name for row in counters.metrics}
    assert names["dcgm_sm_clock"] == "DCGM_FI_DEV_SM_CLOCK"
    assert names["dcgm_gpu_utilization"] == "DCGM_FI_DEV_GPU_UTIL"
    assert names["dcgm_fb_used"] == "DCGM_FI_DEV_FB_USED"
    assert names["dcgm_total_energy_consumption"] == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    # The file lists the PCIe byte rows twice (a DCP block repeats them): the repeat is skipped with a warning.
    assert [warning.split(": ")[1] for warning in counters.warnings] == ["dcgm_fi_prof_pcie_tx_bytes",
                                                                         "dcgm_fi_prof_pcie_rx_bytes"]
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU, values={"DCGM_FI_DEV_SM_CLOCK": 1980}),),
                        status=SamplerStatus(nvml_up=True))
    ctx = RenderContext(snapshot=snapshot, counters=counters,
                        options=RenderOptions(hostname="node-1", use_old_namespace=True))
    [(labels, value)] = [(dict(sample.labels), sample.value) for family in render(ctx)
                         for sample in family.samples if sample.name == "dcgm_sm_clock"]
    assert value == 1980 and labels["uuid"] == "GPU-aaaa" and "UUID" not in labels


def test_every_1x_name_is_known_even_where_this_exporter_cannot_serve_the_field() -> None:
    assert len(ONE_X_FIELD_IDS) == 41
    assert all(CATALOG.is_known_dcgm_name(name) for name in ONE_X_FIELD_IDS)


def test_old_namespace_names_the_workload_labels_as_1x_did() -> None:
    workload = Workload("ml", "trainer-0", "trainer", pod_uid="uid-1")
    labels = workload_labels(workload, kubernetes_settings(
            Config(kubernetes=True, use_old_namespace=True, kubernetes_enable_pod_uid=True)).series)
    assert list(labels.items()) == [("container_name", "trainer"), ("pod_namespace", "ml"),
                                    ("pod_name", "trainer-0"), ("pod_uid", "uid-1")]
