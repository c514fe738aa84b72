"""Should this GPU be drained? A pure verdict from what NVML reported, for ``DCGM_EXP_GPU_HEALTHY``.

The gauge is 1 with ``reason="ok"``, or 0 with the worst current reason. Worst first:

1. ``gpu_lost`` - NVML lost the GPU (GpuIsLost, Unknown, fallen off the bus, reset required). Nothing
   runs on it; the node usually needs a reboot. The GPU stays visible here instead of vanishing.
2. ``row_remap_failure`` - the memory ran out of spare rows (NVML field 145). Permanent: the GPU
   needs replacing. Ranked above a fatal Xid because it does not clear with a reset, and showing it
   keeps the reason stable after the Xid window has passed.
3. ``fatal_xid`` - an Xid of the fatal class (``xid_codes.FATAL_XIDS``) within the Xid window
   (``-x``, default 5 min) on the GPU or any of its MIG instances: reset or reboot before reuse.
   "Recent" is that window so the verdict clears by itself once the GPU has been reset and stays
   quiet, and agrees with ``DCGM_EXP_XID_ERRORS_COUNT``.
4. ``retired_pages_pending`` - pages are waiting to be retired (field 31): a reset completes it.
5. ``row_remap_pending`` - rows are waiting to be remapped (field 144): a reset completes it.

A reading the GPU does not support (V100 has no row remapping, A100 and later no page retirement,
MIG-enabled GPUs no remap counters) simply does not take part. The gauge is per physical GPU.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from exporter.snapshot import DeviceReading

OK = "ok"
GPU_LOST = "gpu_lost"
ROW_REMAP_FAILURE = "row_remap_failure"
FATAL_XID = "fatal_xid"
RETIRED_PAGES_PENDING = "retired_pages_pending"
ROW_REMAP_PENDING = "row_remap_pending"

REASONS_WORST_FIRST = (GPU_LOST, ROW_REMAP_FAILURE, FATAL_XID, RETIRED_PAGES_PENDING, ROW_REMAP_PENDING)

# Catalog names of the readings the verdict uses; the sampler reads them every cycle for the gauge.
_FLAG_REASONS = ((ROW_REMAP_FAILURE, "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
                 (RETIRED_PAGES_PENDING, "DCGM_FI_DEV_RETIRED_PENDING"),
                 (ROW_REMAP_PENDING, "DCGM_FI_DEV_ROW_REMAP_PENDING"))
HEALTH_READINGS = tuple(name for _, name in _FLAG_REASONS)


@dataclass(frozen=True)
class HealthVerdict:
    reason: str  # "ok" or the worst current reason
    reasons: tuple[str, ...] = ()  # every current reason, worst first

    @property
    def healthy(self) -> bool:
        return self.reason == OK


def evaluate(reading: DeviceReading, recent_fatal_xids: Collection[int] = ()) -> HealthVerdict:
    """The verdict for one GPU: its last reading plus the fatal Xids seen on it within the window."""
    current: set[str] = set()
    if not reading.up:
        current.add(GPU_LOST)
    if recent_fatal_xids:
        current.add(FATAL_XID)
    for reason, name in _FLAG_REASONS:
        if reading.values.get(name):
            current.add(reason)
    ordered = tuple(reason for reason in REASONS_WORST_FIRST if reason in current)
    return HealthVerdict(reason=ordered[0] if ordered else OK, reasons=ordered)
