"""A fake NVML C library: installed as ``pynvml.nvmlLib`` it stands where libnvidia-ml.so would.

Production code keeps calling ``pynvml.nvmlDeviceGetX(...)`` unchanged. pynvml looks each C
symbol up on ``nvmlLib`` with ``getattr``, allocates the ctypes out-parameters itself, calls the
function and maps the returned ``nvmlReturn_t`` to its exception classes. So this object only has
to behave like the C ABI: attributes named after C symbols, each taking the ctypes arguments
exactly as pynvml passes them (``byref(struct)`` out-parameters, ``create_string_buffer`` plus a
length, ``c_uint`` by value, device handles as ``c_nvmlDevice_t`` pointers), writing results
through them and returning an int code. pynvml's real wrappers, structs, string decoding and
error mapping then run for real.

Faithfulness rules kept here:

* A symbol the scenario marks missing is not an attribute at all, so pynvml raises
  ``NVMLError_FunctionNotFound`` exactly as with an old driver.
* Units are NVML's: bytes, mW, mJ, MHz, degrees C, percent, ns, KiB for NVLink counters.
* Calls before ``nvmlInit`` (or after the last ``nvmlShutdown``) answer UNINITIALIZED; a bad
  handle answers INVALID_ARGUMENT; a lost GPU answers GPU_IS_LOST to every call that names it,
  including ``nvmlDeviceGetFieldValues`` as a whole (see ``readings.ReadingsMixin._impl_field_values``); a feature the
  board lacks answers NOT_SUPPORTED.
* NVML calls serialize in the driver (on its resource-manager lock: MangoHud#1307, #2104): every
  call runs under one library-wide driver lock, and injected latency is a real sleep taken while
  holding it, so concurrent callers queue as they would on a real driver. Without injected latency a
  call costs a few microseconds of Python.
* ``nvmlDeviceGetPcieThroughput`` always blocks 20 ms (its real sampling window), so a test can
  prove through ``calls`` that production never calls it.
* Events: ``nvmlEventSetWait_v2`` blocks up to its timeout *outside* the driver lock (a real wait
  sleeps in the kernel), wakes at once for ``inject_xid``/``inject_event``, picks up the scenario's
  ``xid_events`` when due, and answers TIMEOUT otherwise. A set only receives events raised after
  the GPU was registered on it (nvml.h); a lost registered GPU answers GPU_IS_LOST once per set.

Device handles are opaque integers written into the ``c_nvmlDevice_t`` pointer; they are never
dereferenced. The handle table maps them to simulated devices. A MIG device handle is its parent's
handle plus one plus its slot (``miglayout.py`` keeps the layout); a device symbol given a MIG
handle runs the method registered with ``mig_variant`` (after the parent's lost/error/hang rules)
or answers NOT_SUPPORTED. GPM sample buffers are opaque pointers too, mapped to the counter
snapshots ``profiling.py`` computes; event sets are opaque handles mapped to ``EventSet`` queues.

Modules: ``abi`` (return codes, the symbol registry, ctypes helpers), ``device`` (the physical
model of one GPU), ``fields`` (field-value readers), ``readings`` (per-device reading symbols),
``processutil`` (per-process utilization samples), ``migdevices``, ``gpm``, ``events``, ``faults``
(injection and the per-call gates), ``state`` (the shared attributes, typed once) and ``library``
(the object itself: construction and dispatch).
"""

from simulator.fakenvml.abi import FIXED_WALL_EPOCH
from simulator.fakenvml.device import SimulatedGpu
from simulator.fakenvml.events import EVENT_POLL_S, XID_EVENT
from simulator.fakenvml.fields import FIELDS, SUPPORTED_FIELD_IDS
from simulator.fakenvml.library import IMPLEMENTED_SYMBOLS, FakeNvmlLibrary, installed

__all__ = [
    "EVENT_POLL_S",
    "FIELDS",
    "FIXED_WALL_EPOCH",
    "IMPLEMENTED_SYMBOLS",
    "SUPPORTED_FIELD_IDS",
    "XID_EVENT",
    "FakeNvmlLibrary",
    "SimulatedGpu",
    "installed",
]
