"""Per-process utilization in the sampler: read on the process interval, each sample once, and the
unsupported path (MIG-enabled GPUs, drivers without the calls) as a log line and a self-metric."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pynvml
import pytest

from exporter.metrics.owned import PROCESS_UTILIZATION_FAMILIES
from exporter.nvml.client import NvmlClient
from exporter.nvml.process_utilization import SIZE_RETRIES, ProcessUtilizationReader, SizeRaceError
from exporter.snapshot import ProcessUtilization, Snapshot
from simulator.fakenvml import FIXED_WALL_EPOCH
from simulator.fakenvml.processutil import SAMPLE_PERIOD_US
from tests.nvml.fake_sampling import captured_logs, samples, sampling

INFO = "nvmlDeviceGetProcessesUtilizationInfo"
LEGACY = "nvmlDeviceGetProcessUtilization"
# GPU 0: one process steps from 20 % to 80 % at 12 s, another is idle until 12 s; GPU 1 is MIG-enabled.
NODE = """
gpu_count: 2
gpus:
  0:
    processes:
      - {pid: 100, used_memory: 1GiB, load: {pattern: steps, steps: [[0s, 20], [12s, 80]]}}
      - {pid: 200, used_memory: 1GiB, load: {pattern: steps, steps: [[0s, 0], [12s, 60]]}, decoder_util: 0}
  1:
    mig: [3g.40gb]
"""


def sm_by_pid(snapshot: Snapshot, gpu: int = 0) -> dict[int, float]:
    reading = snapshot.devices[gpu].process_utilization
    assert reading is not None
    return {sample.pid: sample.sm for sample in reading.samples}


def test_samples_are_read_on_the_process_interval_and_each_counts_once() -> None:
    with sampling(NODE, process_interval_s=5.0) as rig:
        first = rig.cycle(10.0)  # the first read covers one interval: 5 s .. 10 s
        assert sm_by_pid(first) == {100: 20.0}  # 200 was idle: no sample, i.e. 0 %
        reading = first.devices[0].process_utilization
        calls = rig.fake.calls[INFO]
        for at in (11.0, 12.0, 14.0):  # between process reads: no NVML call, the same value
            assert rig.cycle(at).devices[0].process_utilization is reading
        assert rig.fake.calls[INFO] == calls
        # (10 s, 15 s]: 2 s at 20 % and 3 s at 80 % -> 56 %; 200 used 60 % for 3 of 5 s. Had the first
        # window been counted again, 100 would read less and 200 would read 36 % / 2.
        assert sm_by_pid(rig.cycle(15.0)) == pytest.approx({100: 56.0, 200: 36.0}, abs=1.0)
        assert sm_by_pid(rig.cycle(20.0)) == {100: 80.0, 200: 60.0}
        assert rig.fake.calls[LEGACY] == 1  # the MIG GPU's one try; GPU 0 never needs the older call


def test_an_interval_with_no_activity_is_not_found_and_the_next_covers_only_its_own() -> None:
    text = "gpus:\n  0:\n    processes: [{pid: 7, load: {pattern: steps, steps: [[0s, 0], [12s, 60]]}}]\n"
    with sampling(text, process_interval_s=5.0) as rig:
        idle = rig.cycle(10.0).devices[0].process_utilization
        assert idle == ProcessUtilization(samples=(), window_s=5.0)  # NOT_FOUND: every process used 0 %
        # The cursor moved to 10 s: (10 s, 15 s] holds 3 s at 60 % -> 36 %, not (5 s, 15 s] -> 18 %.
        assert sm_by_pid(rig.cycle(15.0)) == pytest.approx({7: 36.0}, abs=1.0)


def test_the_older_call_serves_a_driver_without_the_newer_one() -> None:
    text = f"library: {{missing_symbols: [{INFO}]}}\n" + NODE
    with sampling(text, process_interval_s=5.0) as rig:
        assert sm_by_pid(rig.cycle(10.0)) == {100: 20.0}
        rig.cycle(15.0)
        assert sm_by_pid(rig.cycle(20.0)) == {100: 80.0, 200: 60.0}
        assert rig.fake.calls[INFO] == 0
        unsupported = rig.sampler.snapshot.status.unsupported_fields
        # (page retirement, a default row, predates Ampere: no H100 answers it; not what this test is about)
        assert tuple(field for field in unsupported if field[1] != "DCGM_FI_DEV_RETIRED_PENDING") == (
            *((1, name) for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL",
                                     "DCGM_FI_DEV_DEC_UTIL")),
            *((1, name) for name in PROCESS_UTILIZATION_FAMILIES))  # GPU 0 is fine, the MIG GPU is not


MIG_GPU = "gpus:\n  0:\n    mig: [3g.40gb]\n"
OLD_DRIVER = f"library: {{missing_symbols: [{INFO}, {LEGACY}]}}\ngpus: {{0: {{processes: [{{pid: 1, load: 50}}]}}}}\n"


@pytest.mark.parametrize(("text", "tries"), [(MIG_GPU, 2), (OLD_DRIVER, 0)], ids=["mig", "old-driver"])
def test_unsupported_is_one_log_line_a_self_metric_and_no_more_calls(text: str, tries: int) -> None:
    with captured_logs() as logs, sampling(text, process_interval_s=5.0) as rig:
        for at in (10.0, 15.0, 20.0, 25.0):
            snapshot = rig.cycle(at)
        lines = [record for record in logs.records if "per-process utilization is not supported" in record.getMessage()]
        assert len(lines) == 1 and lines[0].levelno == logging.INFO
        assert snapshot.devices[0].process_utilization is None
        assert snapshot.devices[0].processes is not None  # the memory attribution keeps working
        # each call was tried once (a symbol the driver lacks is not even a call), never again
        assert rig.fake.calls[INFO] + rig.fake.calls[LEGACY] == tries
        omitted = [labels["field"] for labels, _ in samples(rig.render(), "gpu_pod_exporter_field_unsupported")
                   if labels["gpu"] == "0" and labels["field"].startswith("DCGM_EXP_")]
        assert omitted == list(PROCESS_UTILIZATION_FAMILIES)


def test_a_lost_gpu_drops_its_utilization_and_starts_a_new_cursor_when_back() -> None:
    text = NODE + "faults: [{type: gpu_lost, gpu: 0, at: 12s, until: 30s}]\n"
    with sampling(text, process_interval_s=5.0) as rig:
        rig.cycle(10.0)
        lost = rig.cycle(15.0).devices[0]
        assert not lost.up and lost.process_utilization is None
        assert rig.sampler._states[0].utilization.last_seen_us == 0


# -- the reader on its own: pynvml's races and quirks ------------------------------------------------


class SteppingClock:
    """The fake's clock, moving on by ``step`` at each NVML call (one read per call)."""

    def __init__(self, t: float, step: float) -> None:
        self.t = t
        self.step = step

    def __call__(self) -> float:
        now = self.t
        self.t += self.step
        return now


def test_a_process_appearing_between_pynvmls_two_calls_is_asked_again() -> None:
    text = "gpus:\n  0:\n    processes: [{pid: 1, load: 30}, {pid: 2, load: 40, from: 20s}]\n"
    boundary = (20_000_000 // SAMPLE_PERIOD_US + 1) * SAMPLE_PERIOD_US / 1e6  # the first sample with pid 2
    with sampling(text) as rig:
        rig.fake._clock = SteppingClock(boundary - 0.001, 0.002)  # size query before, fill after
        reader = ProcessUtilizationReader()
        nvml = NvmlClient()
        result = reader.read(nvml, rig.sampler._states[0].device.handle,
                             FIXED_WALL_EPOCH + boundary + 0.1, 5.0)
        assert result is not None and {sample.pid: sample.sm for sample in result.samples} == {1: 30.0, 2: 40.0}
        assert nvml.calls_by_function() == {INFO: 2}  # the first attempt met the race
        assert rig.fake.calls[INFO] == 4  # two C calls per attempt


def fake_call(entries: Callable[[], Sequence[Any]]) -> Callable[[Any, int], Sequence[Any]]:
    def call(handle: Any, since: int) -> Sequence[Any]:
        return entries()

    call.__name__ = INFO
    return call


def entry(pid: int, sm: int, timestamp: int = 1_000) -> Any:
    return pynvml.c_nvmlProcessUtilizationInfo_v1_t(timeStamp=timestamp, pid=pid, smUtil=sm, memUtil=1,
                                                    encUtil=0, decUtil=0)


def raises(code: int) -> Callable[[], Sequence[Any]]:
    def answer() -> Sequence[Any]:
        raise pynvml.NVMLError(code)

    return answer


def test_a_size_race_that_never_settles_keeps_the_cursor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, INFO, fake_call(raises(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)))
    reader = ProcessUtilizationReader(call=INFO, last_seen_us=500)
    nvml = NvmlClient()
    with pytest.raises(SizeRaceError):
        reader.read(nvml, None, 1.0, 5.0)
    assert nvml.total_calls == SIZE_RETRIES and reader.last_seen_us == 500


def test_pynvmls_success_on_the_size_query_means_no_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml raises NVMLError(0) when the size query answers SUCCESS (nothing to return)."""
    monkeypatch.setattr(pynvml, INFO, fake_call(raises(pynvml.NVML_SUCCESS)))
    reader = ProcessUtilizationReader()
    assert reader.read(NvmlClient(), None, 2.0, 1.0) == ProcessUtilization(samples=(), window_s=1.0)
    assert reader.last_seen_us == 2_000_000 and reader.call == INFO


def test_bogus_entries_are_dropped_and_a_pid_listed_twice_is_averaged(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = [entry(0, 10), entry(5, 4294967295), entry(9, 30, 2_000), entry(9, 50, 3_000), entry(4, 7)]
    monkeypatch.setattr(pynvml, INFO, fake_call(lambda: answer))
    reader = ProcessUtilizationReader()
    result = reader.read(NvmlClient(), None, 0.004, 1.0)
    assert result is not None
    assert [(sample.pid, sample.sm) for sample in result.samples] == [(4, 7.0), (9, 40.0)]
    assert reader.dropped == 2 and reader.last_seen_us == 3_000  # the newest sample's timestamp


def test_a_lost_gpu_or_nvml_going_away_is_not_mistaken_for_no_support(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, INFO, fake_call(raises(pynvml.NVML_ERROR_GPU_IS_LOST)))
    reader = ProcessUtilizationReader()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        reader.read(NvmlClient(), None, 1.0, 1.0)
    assert not reader.unsupported


# -- what an operator reads when the per-process read fails ----------------------------------------------

TWO_GPUS = "gpu_count: 2\ngpus:\n  0:\n    processes: [{pid: 1, load: 30}]\n"
SIZE_RACE = (f"the process sample count changed between NVML's size query and the fill {SIZE_RETRIES} times in a "
             "row")


def sampler_lines(logs: Any, level: int) -> list[tuple[str, dict[str, Any]]]:
    return [(record.getMessage(), dict(getattr(record, "fields", {}))) for record in logs.records
            if record.levelno == level and record.name == "gpu_pod_exporter.sampler"]


@pytest.mark.parametrize(("code", "error"), [
    (pynvml.NVML_ERROR_INSUFFICIENT_SIZE, SIZE_RACE), (pynvml.NVML_ERROR_TIMEOUT, "NVMLError_Timeout: Timeout")],
    ids=["size-race", "timeout"])
def test_a_failed_read_is_logged_once_per_gpu_and_keeps_the_previous_value(
        monkeypatch: pytest.MonkeyPatch, code: int, error: str) -> None:
    with captured_logs() as logs, sampling(TWO_GPUS, process_interval_s=5.0) as rig:
        before = rig.cycle(10.0).devices[0].process_utilization
        assert before is not None and sm_by_pid(rig.sampler.snapshot) == {1: 30.0}
        monkeypatch.setattr(pynvml, INFO, fake_call(raises(code)))
        for at in (15.0, 20.0):
            assert rig.cycle(at).devices[0].process_utilization is before  # the next good read covers the gap
    assert sampler_lines(logs, logging.WARNING) == [
        ("reading failed; skipped this cycle", {"gpu": gpu, "reading": "process utilization", "error": error})
        for gpu in (0, 1)]


def test_a_gpu_without_per_process_utilization_is_named_with_why_once() -> None:
    text = "gpu_count: 2\ngpu_defaults: {mig: [3g.40gb]}\n"
    with captured_logs() as logs, sampling(text, process_interval_s=5.0) as rig:
        for at in (10.0, 15.0):
            snapshot = rig.cycle(at)
        reasons = [rig.sampler._states[gpu].utilization.unsupported for gpu in (0, 1)]
    lines = [(message, fields) for message, fields in sampler_lines(logs, logging.INFO)
             if message.startswith("per-process utilization")]
    assert lines == [("per-process utilization is not supported on this GPU or driver; its per-container "
                      "utilization families are omitted",
                      {"gpu": gpu, "uuid": snapshot.devices[gpu].identity.uuid, "error": reasons[gpu]})
                     for gpu in (0, 1)]
    assert all(reason.startswith(f"{INFO}: NVMLError_NotSupported") for reason in reasons)
