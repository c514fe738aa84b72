"""Per-process utilization: how much of one GPU each process used since the previous read.

NVML keeps, per GPU, samples of every process's SM, frame-buffer bandwidth, encoder and decoder
utilization. A call names the newest sample the caller has already seen (``lastSeenTimeStamp``,
CPU time in microseconds) and gets one entry per process that had non-zero utilization in a
newer sample: the process's utilization over those samples, with the timestamp of its newest one
(NVML API reference, ``nvmlDeviceGetProcessUtilization``). So a reader that passes the newest timestamp it was
given gets each sample exactly once, and a read every process interval yields each process's
average over that interval. A process without an entry used nothing: absence means 0.

Two calls exist; the newer ``nvmlDeviceGetProcessesUtilizationInfo`` (a versioned struct, in drivers
from about R550; other tools report it as the only one Blackwell GPUs answer) is preferred, and the older
``nvmlDeviceGetProcessUtilization`` is the fallback. The first that works on a GPU is kept.
Answers handled here rather than treated as failures:

* ``NVML_ERROR_NOT_FOUND``: no sample newer than the timestamp: every process used 0 %. The cursor
  moves to the time of the read (NVML's timestamps are the host's wall clock), so the next read
  covers the next interval only, not the idle one too.
* ``NVML_ERROR_INSUFFICIENT_SIZE`` on pynvml's second call: a process appeared between its size
  query and the fill (a new sample period began); asked again, up to ``SIZE_RETRIES`` times.
* ``NVMLError(0)``: pynvml's wrapper raises it when the size query answers SUCCESS (nothing to
  return on some drivers): no samples.
* NotSupported / FunctionNotFound / NoPermission from both calls (MIG-enabled GPUs, drivers
  without the symbols): the GPU has no per-process utilization; ``unsupported`` says why and the
  reader never asks again (until ``reset``, e.g. when MIG is turned off).

Entries with a PID of 0 or a value above 100 (reported by users of some drivers for zombie
processes) are dropped. Two entries for one PID (not documented, but cheap to survive) are
averaged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe
from exporter.snapshot import ProcessUtilization, ProcessUtilizationSample

SIZE_RETRIES = 3
# Preferred first: (name for logs, pynvml wrapper). Looked up at call time so tests may patch pynvml.
CALLS: tuple[str, ...] = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
_NO_SAMPLES = (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS)


class SizeRaceError(Exception):
    """The sample count kept changing between pynvml's size query and its fill (try next interval)."""


@dataclass
class ProcessUtilizationReader:
    """One GPU's per-process utilization cursor; owned by the sampling thread."""

    call: str | None = None  # the NVML call that works on this GPU, once one has answered
    unsupported: str = ""  # why neither call works here ("" while supported or not yet known)
    last_seen_us: int = 0  # newest sample timestamp seen (0: never read)
    dropped: int = 0  # entries dropped as invalid since start (PID 0, values above 100)
    _tried: dict[str, str] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget the cursor and what the GPU supports (its MIG mode changed, or it was lost)."""
        self.call = None
        self.unsupported = ""
        self.last_seen_us = 0
        self._tried.clear()

    def read(self, nvml: NvmlClient, handle: Any, wall_now: float, interval_s: float) -> ProcessUtilization | None:
        """Samples since the previous read (the first read: since one ``interval_s`` ago).

        None when the GPU has no per-process utilization (``unsupported`` says why). Raises
        ``SizeRaceError`` or the NVML error for anything else (lost GPU, NVML down, transient):
        the caller classifies it, and the cursor stays, so the next read covers this interval too.
        """
        if self.unsupported:
            return None
        now_us = int(wall_now * 1_000_000)
        since = self.last_seen_us or max(0, now_us - int(interval_s * 1_000_000))
        entries = self._entries(nvml, handle, since)
        if entries is None:
            return None
        newest = 0
        values: dict[int, list[tuple[int, int, int, int]]] = {}
        for entry in entries:
            reading = (int(entry.smUtil), int(entry.memUtil), int(entry.encUtil), int(entry.decUtil))
            if not entry.pid or max(reading) > 100:
                self.dropped += 1
                continue
            newest = max(newest, int(entry.timeStamp))
            values.setdefault(int(entry.pid), []).append(reading)
        self.last_seen_us = max(since, newest if newest else now_us)
        samples = tuple(ProcessUtilizationSample(pid, *(sum(column) / len(readings) for column in zip(*readings,
                                                                                                        strict=True)))
                        for pid, readings in sorted(values.items()))
        return ProcessUtilization(samples=samples, window_s=max(0.0, (now_us - since) / 1_000_000))

    def _entries(self, nvml: NvmlClient, handle: Any, since: int) -> Sequence[Any] | None:
        """The raw entries of the first call that works (empty: no new samples); None: neither works."""
        for name in [self.call] if self.call else CALLS:
            function: Callable[..., Sequence[Any]] = getattr(pynvml, name)
            try:
                entries = _call_with_retries(nvml, function, handle, since)
            except pynvml.NVMLError as exc:
                if classify(exc) is not ErrorClass.UNSUPPORTED:
                    raise
                self._tried[name] = describe(exc)
                if self.call == name:  # it worked before and stopped: look at both again next time
                    self.call = None
                continue
            self.call = name
            return entries
        if all(name in self._tried for name in CALLS):
            self.unsupported = "; ".join(f"{name}: {self._tried[name]}" for name in CALLS)
            return None
        return []  # the known call stopped working: nothing this time, both are tried next time


def _call_with_retries(nvml: NvmlClient, function: Callable[..., Sequence[Any]], handle: Any,
                       since: int) -> Sequence[Any]:
    for _ in range(SIZE_RETRIES):
        try:
            return nvml.call(function, handle, since)
        except pynvml.NVMLError as exc:
            if exc.value in _NO_SAMPLES:
                return ()
            if exc.value != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
                raise
    raise SizeRaceError(f"the process sample count changed between NVML's size query and the fill "
                        f"{SIZE_RETRIES} times in a row")
