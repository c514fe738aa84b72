"""CPU and memory of a running process, read from /proc (Linux only).

CPU is utime + stime from ``/proc/<pid>/stat``: it includes threads that have already exited (the
per-request threads of a threading HTTP server), which per-thread counters would lose. Its resolution
is one clock tick (10 ms at the usual USER_HZ=100), so the harness measures over windows of seconds.
Memory is VmRSS (now) and VmHWM (the peak RSS since the process started) from ``/proc/<pid>/status``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
KIB = 1024


@dataclass(frozen=True)
class CpuTimes:
    user_s: float
    system_s: float

    @property
    def total_s(self) -> float:
        return self.user_s + self.system_s


@dataclass(frozen=True)
class Memory:
    rss_bytes: int
    peak_rss_bytes: int


def parse_stat(text: str, ticks_per_s: int = CLOCK_TICKS_PER_S) -> CpuTimes:
    """utime and stime (fields 14 and 15) of a ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may itself contain spaces and parentheses, so
    the fields are counted from the last ``)``.
    """
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    if len(fields) < 13:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    # rest starts at field 3 (state): utime is field 14 -> index 11, stime field 15 -> index 12.
    return CpuTimes(int(fields[11]) / ticks_per_s, int(fields[12]) / ticks_per_s)


def parse_status_memory(text: str) -> Memory:
    """VmRSS and VmHWM (kB in the file) of a ``/proc/<pid>/status`` text, in bytes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in {"VmRSS", "VmHWM"}:
            number, _, unit = value.strip().partition(" ")
            if unit.strip() != "kB":
                raise ValueError(f"unexpected unit in /proc status line {line!r}")
            values[key] = int(number) * KIB
    if set(values) != {"VmRSS", "VmHWM"}:
        raise ValueError("VmRSS/VmHWM missing from /proc status (a kernel thread or a zombie?)")
    return Memory(rss_bytes=values["VmRSS"], peak_rss_bytes=values["VmHWM"])


def cpu_times(pid: int) -> CpuTimes:
    return parse_stat(Path(f"/proc/{pid}/stat").read_text())


def memory(pid: int) -> Memory:
    return parse_status_memory(Path(f"/proc/{pid}/status").read_text())
