"""Per-process utilization: ``nvmlDeviceGetProcessUtilization`` and ``nvmlDeviceGetProcessesUtilizationInfo``.

What the driver does, as far as NVML's documentation (``nvmlDeviceGetProcessUtilization``,
``nvmlProcessUtilizationSample_t``) and users' reports (Syllo/nvtop#91) tell, and what this fake
does the same way:

* The driver samples every process's SM, frame-buffer bandwidth, encoder and decoder utilization
  at a fixed period and keeps the samples in a bounded buffer (here every ``SAMPLE_PERIOD_US``,
  the 1/6 s of a data-centre GPU's utilization sampling, and ``BUFFER_SAMPLES`` of them).
* A call returns, per process that had non-zero utilization in a sample newer than the caller's
  ``lastSeenTimeStamp``, one entry: its utilization over those samples (here the rounded mean over
  the samples in which the process ran) and the CPU time in microseconds of its newest sample.
  0 means "everything in the buffer". A process that was idle has no entry: absence means 0.
* Nothing newer than the timestamp -> ``NVML_ERROR_NOT_FOUND``.
* Two calls: a size query with a NULL buffer answers ``NVML_ERROR_INSUFFICIENT_SIZE`` and the
  count; a buffer smaller than the count answers the same. A sample period that ends between the
  two calls can add a process, so the second call can say INSUFFICIENT_SIZE too: the caller
  retries (pynvml's wrappers raise ``NVMLError_InsufficientSize`` then).
* Not supported on MIG-enabled GPUs nor on MIG device handles (NOT_SUPPORTED).
* The newer call takes a versioned struct (``ProcessesUtilizationInfo_v1``; another version ->
  ``NVML_ERROR_ARGUMENT_VERSION_MISMATCH``) and adds JPEG and OFA utilization (0 here).

The activity comes from the scenario: each process's own ``load``/``memory_util``/... patterns,
or an equal share of its GPU's (``device.SimulatedGpu.process_activity``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from simulator.fakenvml.abi import (
    INSUFFICIENT_SIZE,
    NOT_FOUND,
    NOT_SUPPORTED,
    SUCCESS,
    VERSION_MISMATCH,
    c_int_value,
    c_symbol,
    pointee,
)
from simulator.fakenvml.device import SimulatedGpu
from simulator.fakenvml.state import LibraryState

SAMPLE_PERIOD_US = 166_667  # the driver's per-process sampling period (1/6 s)
BUFFER_SAMPLES = 600  # sample periods the driver keeps (100 s): lastSeenTimeStamp 0 averages over these


@dataclass(frozen=True)
class ProcessSample:
    """One entry of the answer: a process's utilization over the samples asked for (integer percent)."""

    pid: int
    timestamp_us: int  # CPU time of its newest sample, microseconds since the epoch
    sm: int
    memory: int
    encoder: int
    decoder: int


class ProcessUtilizationMixin(LibraryState):
    """The two per-process utilization symbols, answering from the GPU model's process activity."""

    def process_samples(self, gpu: SimulatedGpu, t: float, last_seen_us: int) -> list[ProcessSample]:
        """The entries a call at scenario time ``t`` returns for samples newer than ``last_seen_us``."""
        epoch_us = round(self._epoch * 1_000_000)
        newest = int(t * 1_000_000) // SAMPLE_PERIOD_US
        if newest < 0:
            return []
        first = max(newest - BUFFER_SAMPLES + 1, 0, (last_seen_us - epoch_us) // SAMPLE_PERIOD_US)
        while first <= newest and epoch_us + first * SAMPLE_PERIOD_US <= last_seen_us:
            first += 1  # only samples strictly newer than the caller's timestamp
        totals: dict[int, list[int]] = {}  # pid -> [samples, sm, memory, encoder, decoder, newest timestamp]
        for period in range(first, newest + 1):
            moment_us = period * SAMPLE_PERIOD_US
            for pid, load in gpu.process_activity(moment_us / 1_000_000).items():
                total = totals.setdefault(pid, [0, 0, 0, 0, 0, 0])
                total[0] += 1
                total[1] += round(load.sm)
                total[2] += round(load.memory)
                total[3] += round(load.encoder)
                total[4] += round(load.decoder)
                total[5] = epoch_us + moment_us
        samples = []
        for pid, (count, sm, memory, encoder, decoder, stamp) in sorted(totals.items()):
            if sm or memory or encoder or decoder:  # NVML lists processes with non-zero utilization only
                samples.append(ProcessSample(pid, stamp, round(sm / count), round(memory / count),
                                             round(encoder / count), round(decoder / count)))
        return samples

    def _sample_answer(self, gpu: SimulatedGpu, t: float, last_seen: Any, capacity: int,
                       has_buffer: bool) -> tuple[int, list[ProcessSample]]:
        """(return code, samples to write): the two-call protocol shared by both symbols."""
        if gpu.mig is not None:
            return NOT_SUPPORTED, []  # nvml.h: not supported on MIG-enabled GPUs
        samples = self.process_samples(gpu, t, c_int_value(last_seen))
        if not samples:
            return NOT_FOUND, []
        if not has_buffer or capacity < len(samples):
            return INSUFFICIENT_SIZE, samples
        return SUCCESS, samples

    @c_symbol("nvmlDeviceGetProcessUtilization", device=True)
    def _impl_process_utilization(self, gpu: SimulatedGpu, t: float, utilization: Any, count: Any,
                                  last_seen: Any) -> int:
        counter = pointee(count)
        code, samples = self._sample_answer(gpu, t, last_seen, counter.value, utilization is not None)
        if code in (SUCCESS, INSUFFICIENT_SIZE):
            counter.value = len(samples)
        if code == SUCCESS:
            _fill(utilization, samples)
        return code

    @c_symbol("nvmlDeviceGetProcessesUtilizationInfo", device=True)
    def _impl_processes_utilization_info(self, gpu: SimulatedGpu, t: float, info: Any) -> int:
        request = pointee(info)
        if request.version != pynvml.ProcessesUtilizationInfo_v1:
            return VERSION_MISMATCH
        array = request.procUtilArray
        code, samples = self._sample_answer(gpu, t, request.lastSeenTimeStamp, request.processSamplesCount,
                                            bool(array))
        if code in (SUCCESS, INSUFFICIENT_SIZE):
            request.processSamplesCount = len(samples)
        if code == SUCCESS:
            _fill(array, samples)  # jpgUtil and ofaUtil stay 0: the scenario has no JPEG or OFA work
        return code


def _fill(entries: Any, samples: list[ProcessSample]) -> None:
    """Write samples into the caller's array (either struct: both have these six members)."""
    for slot, sample in enumerate(samples):
        entry = entries[slot]
        entry.pid = sample.pid
        entry.timeStamp = sample.timestamp_us
        entry.smUtil = sample.sm
        entry.memUtil = sample.memory
        entry.encUtil = sample.encoder
        entry.decUtil = sample.decoder
