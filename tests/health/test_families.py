"""What the Xid, clock-event and health families render: values, label names and order, MIG attribution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client.core import Metric

from exporter.health.clock_events import ClockEventTracker
from exporter.health.families import clock_event_families, health_family, xid_families
from exporter.health.xid import XidLedger, XidSource
from exporter.metrics.counters import load_counters, parse_counters
from exporter.metrics.render import DEFAULT_BUILDERS, RenderContext, RenderOptions, render
from exporter.snapshot import DeviceIdentity, DeviceReading, MigIdentity, MigReading, SamplerStatus, Snapshot
from tests.simulator.conftest import FixedClock

HEALTH_CSV = Path(__file__).resolve().parents[1] / "fixtures" / "health-counters.csv"
# dcgm-exporter 4.8's own list (what -f /etc/dcgm-exporter/default-counters.csv exports): no Xid counts.
DCGM_EXPORTER_48_CSV = str(Path(__file__).resolve().parents[2] / "exporter" / "metrics" / "data" / "dcgm-exporter"
                           / "default-counters.csv")
GPU0 = DeviceIdentity(index=0, uuid="GPU-aaaa", pci_bus_id="00000000:8D:00.0", minor=0, model="NVIDIA H100 80GB HBM3")
GPU1 = DeviceIdentity(index=1, uuid="GPU-bbbb", pci_bus_id="00000000:9D:00.0", minor=1, model="NVIDIA H100 80GB HBM3")
STATUS = SamplerStatus(nvml_up=True, driver_version="550.90.07", device_count=2, last_sample_monotonic=1.0)
BASE = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
WINDOW_MS = 10_000


def samples(families: Sequence[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(sample.labels), sample.value) for family in families for sample in family.samples
            if sample.name == name]


def by_gpu(families: Sequence[Metric], name: str) -> dict[tuple[str, ...], float]:
    """Samples keyed by gpu plus each non-identity label value, in label order."""
    return {(labels["gpu"], *(value for key, value in labels.items() if key not in BASE)): value
            for labels, value in samples(families, name)}


def render_health(snapshot: Snapshot, ledger: XidLedger, tracker: ClockEventTracker | None = None,
                  csv: str | None = str(HEALTH_CSV), **kwargs: object) -> list[Metric]:
    counters = load_counters(csv)
    builders = [*DEFAULT_BUILDERS, xid_families(ledger, WINDOW_MS), health_family(ledger)]
    if tracker is not None:
        builders.append(clock_event_families(tracker, WINDOW_MS))
    ctx = RenderContext(snapshot=snapshot, counters=counters, options=RenderOptions(hostname="node-1"),
                        **kwargs)  # type: ignore[arg-type]
    return render(ctx, builders)


def two_gpus(**values: Mapping[str, float]) -> Snapshot:
    return Snapshot(devices=(DeviceReading(identity=GPU0, values=dict(values.get("gpu0", {}))),
                             DeviceReading(identity=GPU1, values=dict(values.get("gpu1", {})))), status=STATUS)


def test_before_any_xid_every_gpu_has_a_zero_last_xid_and_an_empty_window() -> None:
    families = render_health(two_gpus(), XidLedger(10.0))
    gauge = samples(families, "DCGM_FI_DEV_XID_ERRORS")
    assert [(labels["gpu"], labels["err_code"], labels["err_msg"], value) for labels, value in gauge] == [
        ("0", "0", "No Error", 0), ("1", "0", "No Error", 0)]
    assert list(gauge[0][0]) == [*BASE, "err_code", "err_msg"]
    assert by_gpu(families, "DCGM_EXP_XID_ERRORS_COUNT") == {("0", "10000"): 0, ("1", "10000"): 0}
    assert samples(families, "DCGM_EXP_XID_ERRORS_TOTAL") == []


def test_dcgm_exporters_48_list_exports_the_last_xid_gauge_only() -> None:
    ledger = XidLedger(10.0)
    ledger.record(XidSource("GPU-aaaa"), 79)
    families = render_health(two_gpus(), ledger, csv=DCGM_EXPORTER_48_CSV)
    assert by_gpu(families, "DCGM_FI_DEV_XID_ERRORS") == {("0", "79", "GPU has fallen off the bus"): 79,
                                                          ("1", "0", "No Error"): 0}
    assert samples(families, "DCGM_EXP_XID_ERRORS_TOTAL") == []
    assert len([family for family in families if family.name == "DCGM_FI_DEV_XID_ERRORS"]) == 1


def test_a_storm_is_counted_exactly_and_the_window_decays() -> None:
    clock = FixedClock(50.0)
    ledger = XidLedger(WINDOW_MS / 1000, clock)
    for _ in range(60):
        ledger.record(XidSource("GPU-aaaa"), 31)
    for _ in range(40):
        ledger.record(XidSource("GPU-bbbb"), 13)
    families = render_health(two_gpus(), ledger)
    assert by_gpu(families, "DCGM_EXP_XID_ERRORS_TOTAL") == {("0", "31"): 60, ("1", "13"): 40}
    assert by_gpu(families, "DCGM_EXP_XID_ERRORS_COUNT") == {("0", "10000", "31"): 60, ("1", "10000", "13"): 40}
    [(labels, _)] = [sample for sample in samples(families, "DCGM_EXP_XID_ERRORS_COUNT") if sample[0]["gpu"] == "0"]
    assert list(labels)[-2:] == ["window_size_in_ms", "xid"]
    clock.t += WINDOW_MS / 1000
    families = render_health(two_gpus(), ledger)
    assert by_gpu(families, "DCGM_EXP_XID_ERRORS_COUNT") == {("0", "10000", "31"): 0, ("1", "10000", "13"): 0}
    assert by_gpu(families, "DCGM_EXP_XID_ERRORS_TOTAL") == {("0", "31"): 60, ("1", "13"): 40}
    assert by_gpu(families, "DCGM_FI_DEV_XID_ERRORS")[("0", "31", "GPU memory page fault")] == 31


def test_a_lost_gpu_keeps_its_xid_series_and_is_reported_unhealthy() -> None:
    ledger = XidLedger(10.0)
    ledger.record(XidSource("GPU-bbbb"), 79)
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 40}),
                                 DeviceReading(identity=GPU1, up=False, error="NVMLError_GpuIsLost")), status=STATUS)
    families = render_health(snapshot, ledger)
    assert by_gpu(families, "DCGM_FI_DEV_GPU_TEMP") == {("0",): 40}
    assert by_gpu(families, "DCGM_EXP_GPU_HEALTHY") == {("0", "ok"): 1, ("1", "gpu_lost"): 0}
    assert by_gpu(families, "DCGM_FI_DEV_XID_ERRORS")[("1", "79", "GPU has fallen off the bus")] == 79
    assert by_gpu(families, "DCGM_EXP_XID_ERRORS_TOTAL") == {("1", "79"): 1}


def test_the_health_gauge_is_always_on_with_workload_labels_then_reason() -> None:
    def workloads(identity: DeviceIdentity, _gi: int | None) -> Sequence[Mapping[str, str]]:
        return ({"container": "trainer", "namespace": "ml", "pod": "train-0"},) if identity.index == 0 else ({},)

    ledger = XidLedger(10.0)
    ledger.record(XidSource("GPU-aaaa"), 48)
    snapshot = two_gpus(gpu1={"DCGM_FI_DEV_ROW_REMAP_PENDING": 1})
    families = render_health(snapshot, ledger, csv=DCGM_EXPORTER_48_CSV, workloads=workloads)
    healthy = samples(families, "DCGM_EXP_GPU_HEALTHY")
    assert list(healthy[0][0]) == [*BASE, "container", "namespace", "pod", "reason"]
    assert by_gpu(families, "DCGM_EXP_GPU_HEALTHY") == {("0", "trainer", "ml", "train-0", "fatal_xid"): 0,
                                                        ("1", "row_remap_pending"): 0}
    assert samples(families, "DCGM_FI_DEV_ROW_REMAP_PENDING") == []  # read for health, not exported


def test_an_xid_attributed_to_a_mig_instance_carries_its_labels() -> None:
    mig = MigIdentity(parent_uuid="GPU-aaaa", uuid="MIG-1111", gpu_instance_id=7, compute_instance_id=0,
                      profile="1g.10gb")
    reading = DeviceReading(identity=GPU0, mig=(MigReading(identity=mig),))
    ledger = XidLedger(10.0)
    ledger.record(XidSource("GPU-aaaa", 7, 0), 94)
    ledger.record(XidSource("GPU-aaaa", 9, 0), 31)  # no such instance in the snapshot: counts on the parent
    families = render_health(Snapshot(devices=(reading,), status=STATUS), ledger)
    totals = samples(families, "DCGM_EXP_XID_ERRORS_TOTAL")
    assert [(labels.get("GPU_I_ID"), labels["xid"], value) for labels, value in totals] == [
        (None, "31", 1), ("7", "94", 1)]
    assert list(totals[1][0])[5:7] == ["GPU_I_PROFILE", "GPU_I_ID"]
    gauge = {labels.get("GPU_I_ID"): value for labels, value in samples(families, "DCGM_FI_DEV_XID_ERRORS")}
    assert gauge == {None: 31, "7": 94}  # the parent shows the GPU's latest, the instance its own
    assert by_gpu(families, "DCGM_EXP_GPU_HEALTHY") == {("0", "fatal_xid"): 0}


def test_clock_event_series_per_reason_with_window_label() -> None:
    clock = FixedClock(5.0)
    tracker = ClockEventTracker(WINDOW_MS / 1000, clock)
    tracker.observe(two_gpus(gpu0={"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x4}))
    families = render_health(two_gpus(), XidLedger(10.0), tracker)
    counts = samples(families, "DCGM_EXP_CLOCK_EVENTS_COUNT")
    assert len(counts) == 9 and {labels["gpu"] for labels, _ in counts} == {"0"}  # GPU 1 reported no bitmask
    assert list(counts[0][0])[-2:] == ["clock_event", "window_size_in_ms"]
    assert by_gpu(families, "DCGM_EXP_CLOCK_EVENTS_COUNT")[("0", "power_cap", "10000")] == 1
    assert by_gpu(families, "DCGM_EXP_CLOCK_EVENTS_TOTAL")[("0", "power_cap")] == 1
    assert by_gpu(families, "DCGM_EXP_CLOCK_EVENTS_TOTAL")[("0", "hw_thermal")] == 0


def test_a_csv_alias_and_its_own_help_text_name_the_family() -> None:
    counters_text = "DCGM_FI_DEV_XID_ERROR, gauge, my text\n"
    ctx = RenderContext(snapshot=two_gpus(), counters=parse_counters(counters_text, "c.csv"),
                        options=RenderOptions(hostname=None))
    [family] = xid_families(XidLedger(10.0), WINDOW_MS)(ctx)
    assert (family.name, family.documentation, family.type) == ("DCGM_FI_DEV_XID_ERROR", "my text", "gauge")
    assert [sample.name for sample in family.samples] == ["DCGM_FI_DEV_XID_ERROR"] * 2
