"""What an Xid code means, for the ``err_msg`` label, and which codes mean "take this GPU out of service".

dcgm-exporter puts a short text on ``DCGM_FI_DEV_XID_ERRORS`` (``err_code="79", err_msg="GPU has
fallen off the bus"``), "No Error" for 0 and "Unknown Error" for a code it does not know. This table
covers the codes operators meet in practice, worded after NVIDIA's public Xid catalogue; anything else
is "Unknown Error", exactly like dcgm-exporter outside its table. NVML reports 999 when the driver
raised an Xid NVML cannot name.

``FATAL_XIDS`` drives ``DCGM_EXP_GPU_HEALTHY{reason="fatal_xid"}``: codes after which the GPU needs a
reset, a reboot or a replacement before it should run work again. It is the union of the alert
rules' classes (docs/alerts.md "Xid classes": fatal 48, 62, 64, 74, 79, 95, 119, 120 and needs-reset
63, 92, 94). Application faults (13, 31, 43, 45, 68, 109, ...) end one job and leave the GPU usable,
so they are not in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

NO_ERROR = "No Error"
UNKNOWN_ERROR = "Unknown Error"

XID_MEANINGS: Mapping[int, str] = MappingProxyType({
    8: "GPU stopped processing (timeout)",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    44: "Graphics Engine fault during context switch",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    56: "Display Engine error",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link Error",
    140: "Unrecovered ECC Error",
    154: "GPU Recovery Action Changed",
})

# The alert rules' two classes (GpuXidFatal, GpuXidNeedsReset; docs/alerts.md "Xid classes"), defined here
# once: exporter.conditions reads them for the page and `top`, tests/test_conditions.py checks the rules.
FATAL_CLASS_XIDS: frozenset[int] = frozenset({48, 62, 64, 74, 79, 95, 119, 120})
NEEDS_RESET_XIDS: frozenset[int] = frozenset({63, 92, 94})
FATAL_XIDS: frozenset[int] = FATAL_CLASS_XIDS | NEEDS_RESET_XIDS


def xid_message(code: int) -> str:
    """The ``err_msg`` label for ``code``: "No Error" for 0, "Unknown Error" outside the table."""
    if code == 0:
        return NO_ERROR
    return XID_MEANINGS.get(code, UNKNOWN_ERROR)
