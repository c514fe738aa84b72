"""--hpc-job-mapping-dir: dcgm-exporter's <gpu> / <gpu>.<gi> job files become an hpc_job label."""

from __future__ import annotations

from pathlib import Path

from exporter.hpcjobs import MAX_JOBS_PER_FILE, HpcJobMapping, read_job_mapping
from exporter.hub import with_label_sources
from exporter.metrics.counters import load_counters
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.snapshot import DeviceIdentity, DeviceReading, MigIdentity, MigReading, SamplerStatus, Snapshot
from tests.nvml.fake_sampling import captured_logs

GPU0 = DeviceIdentity(index=0, uuid="GPU-aaaa", pci_bus_id="00000000:18:00.0", minor=0, model="NVIDIA H100")
GPU1 = DeviceIdentity(index=1, uuid="GPU-bbbb", pci_bus_id="00000000:2A:00.0", minor=1, model="NVIDIA H100")
MIG = MigIdentity(parent_uuid=GPU1.uuid, uuid="MIG-1", gpu_instance_id=3, compute_instance_id=0, profile="3g.40gb")
SNAPSHOT = Snapshot(
    devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 50}),
             DeviceReading(identity=GPU1, values={"DCGM_FI_DEV_GPU_TEMP": 60},
                           mig=(MigReading(identity=MIG, values={"DCGM_FI_DEV_FB_USED": 100}),))),
    status=SamplerStatus(nvml_up=True))


def _jobs_of(mapping: HpcJobMapping, name: str) -> list[tuple[str, str | None, str | None]]:
    ctx = RenderContext(snapshot=SNAPSHOT, counters=load_counters(None), options=RenderOptions(hostname="n"))
    ctx = with_label_sources(ctx, [mapping.labeler])  # as the hub does once per render
    return [(sample.labels["gpu"], sample.labels.get("GPU_I_ID"), sample.labels.get("hpc_job"))
            for family in render(ctx) for sample in family.samples if sample.name == name]


def test_one_series_per_job_and_untouched_series_without_a_file(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1001\n\n  1002  \n1001\n")  # blank lines skipped, repeats once
    (tmp_path / "1.3").write_text("2001\n")
    (tmp_path / "README").write_text("not a GPU")  # other names are ignored
    (tmp_path / "7").mkdir()  # as are directories
    mapping = HpcJobMapping(str(tmp_path), 5.0)
    assert mapping.refresh() is True
    assert _jobs_of(mapping, "DCGM_FI_DEV_GPU_TEMP") == [("0", None, "1001"), ("0", None, "1002"),
                                                         ("1", None, None)]
    assert _jobs_of(mapping, "DCGM_FI_DEV_FB_USED") == [("1", "3", "2001")]
    assert mapping.refresh() is False  # nothing changed: no re-render


def test_a_job_that_ends_takes_its_label_away(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1001\n")
    mapping = HpcJobMapping(str(tmp_path), 5.0)
    mapping.refresh()
    (tmp_path / "0").write_text("")
    assert mapping.refresh() is True
    assert _jobs_of(mapping, "DCGM_FI_DEV_GPU_TEMP")[0] == ("0", None, None)


def test_reading_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("".join(f"job-{number}\n" for number in range(MAX_JOBS_PER_FILE + 50)))
    mapping, problems = read_job_mapping(tmp_path)
    assert len(mapping[(0, None)]) == MAX_JOBS_PER_FILE
    assert problems and "the rest is ignored" in problems[0]


def test_a_missing_directory_is_logged_once_and_recovers(tmp_path: Path) -> None:
    directory = tmp_path / "jobs"
    mapping = HpcJobMapping(str(directory), 5.0)
    with captured_logs() as logs:
        for _ in range(3):
            mapping.refresh()
        directory.mkdir()
        (directory / "0").write_text("42\n")
        assert mapping.refresh() is True
    messages = logs.messages()
    assert sum("cannot list the HPC job mapping directory" in message for message in messages) == 1
    assert any("readable again" in message for message in messages)
    assert mapping.mapping == {(0, None): ("42",)}


def test_an_unreadable_file_is_reported_and_the_others_still_count(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1\n")
    (tmp_path / "1").symlink_to(tmp_path / "gone")  # a job file removed under a link: unreadable
    mapping, problems = read_job_mapping(tmp_path)
    assert mapping == {(0, None): ("1",)} and "cannot read" in problems[0]
