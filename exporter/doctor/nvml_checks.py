"""NVML and every GPU: library, versions, identity, MIG, GPM, events, process lists, and each counter row.

The truth about a counter row is the exporter's own sampler: the doctor runs it (the same plan,
the same queries, the same error classification) for two cycles, so rates and GPM metrics have a
previous sample, and a row is **served** when the sampler produced a value. A row without a value
is then explained by asking NVML for exactly that row's source once more (``explain``): the error
class the exporter uses decides between **not supported on this GPU** (the series is omitted, as
dcgm-exporter omits it: not a problem) and **failing** (with NVML's error).

Every NVML call runs under a deadline (``run_with_deadline``): a hung driver call becomes a failed
row naming the call and the GPU, never a hung doctor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import pynvml

from exporter.config import Config
from exporter.doctor.deadline import run_with_deadline
from exporter.doctor.report import Row, degraded, failed, ok, skipped
from exporter.metrics.catalog import CATALOG, FieldKey, FieldSpec
from exporter.metrics.counters import CounterRow, CounterSet
from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe
from exporter.nvml.events import EVENT_TYPE_NAMES, REQUESTED_EVENT_TYPES, XID_EVENT
from exporter.nvml.gpm import GpmReader, gpm_unsupported
from exporter.nvml.inventory import Device, Inventory
from exporter.nvml.queries import QUERIES, QueryState
from exporter.nvml.sampler import Sampler
from exporter.snapshot import DeviceIdentity, DeviceReading, GpuProcess, MigIdentity, Snapshot

T = TypeVar("T")

SECTION = "nvml"
CYCLES = 2
GPM_SAMPLE_GAP_S = 0.15  # NVML wants GPM samples more than 100 ms apart; rates need two timestamps

NVML_HINTS: dict[str, str] = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1 cannot be loaded: install the NVIDIA driver on the node; in a "
    "container run with the NVIDIA runtime (runtimeClassName: nvidia, GPU Operator toolkit) so the driver "
    "libraries are mounted, with NVIDIA_DRIVER_CAPABILITIES including utility",
    "NVMLError_DriverNotLoaded": "the nvidia kernel module is not loaded (yet): check `lsmod | grep nvidia` and "
    "dmesg; on GPU Operator nodes wait for the driver DaemonSet (the exporter retries with backoff)",
    "NVMLError_LibRmVersionMismatch": "NVML library and kernel module versions differ (driver upgraded without "
    "reload): reboot the node or reload the nvidia kernel modules, then restart the exporter pod",
    "NVMLError_NoPermission": "no permission on /dev/nvidia*: run the exporter as root or give it the device "
    "files (the chart runs UID 0 and the NVIDIA runtime mounts them)",
}
DEFAULT_NVML_HINT = "NVML cannot start: run nvidia-smi on the host; it fails the same way, and dmesg says why"
LOST_HINT = ("the GPU has fallen off the bus or needs a reset: look for Xid 79/48/119 in dmesg, cordon and drain "
             "the node, then reset the GPU (nvidia-smi -r -i <index>) or reboot; the other GPUs keep reporting")
HANG_HINT = ("an NVML call does not return (hung GPU or driver): look for Xids in dmesg; the exporter keeps serving "
             "its last sample and /health names the call; drain the node and reset the GPU or reboot")
FAILING_HINT = ("NVML answers an error for this reading (retried every cycle): check `nvidia-smi -q -i <index>` "
                "and dmesg for this GPU")
NO_VALUE_HINT = ("no value after two sampling cycles although NVML answers: look at the exporter's /metrics after "
                 "a minute; if still absent, report it with this output")
NO_GPU_HINT = ("NVML sees no GPU: give the exporter container every GPU (NVIDIA_VISIBLE_DEVICES=all) and check the "
               "GPUs are bound to the nvidia driver (lspci -k)")


class RecordingClient(NvmlClient):
    """An NvmlClient that remembers the last NVML function called, to name it in a failing row."""

    last_function = ""

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.last_function = getattr(function, "__name__", "nvml")
        return super().call(function, *args, **kwargs)


@dataclass
class NvmlFindings:
    """Rows plus what the other checks need: this node's GPUs, MIG devices and GPU processes."""

    rows: list[Row] = field(default_factory=list)
    nvml_up: bool = False
    devices: tuple[DeviceIdentity, ...] = ()
    migs: tuple[MigIdentity, ...] = ()
    processes: dict[int, tuple[GpuProcess, ...]] = field(default_factory=dict)  # NVML index -> processes
    unreadable: tuple[int, ...] = ()  # GPUs whose identity NVML could not read (lost at discovery)
    hung: str = ""  # the hung call, when NVML stopped answering


@dataclass(frozen=True)
class _Probe:
    """The outcome of asking NVML for one reading again: None error = it answered."""

    function: str
    error: BaseException | None = None

    @property
    def kind(self) -> ErrorClass | None:
        return None if self.error is None else classify(self.error)


def gpu_section(index: int) -> str:
    return f"gpu {index}"


def cuda_version_text(version: int) -> str:
    return f"{version // 1000}.{(version % 1000) // 10}"


def check_nvml(config: Config, counters: CounterSet | None, timeout_s: float) -> NvmlFindings:
    """Initialise NVML the exporter's way, sample twice, and report NVML, each GPU and each counter row."""
    findings = NvmlFindings()
    specs = counters.field_specs() if counters is not None else ()
    sampler = Sampler(specs, config.collect_interval_s)
    inventory = _initialise(sampler, timeout_s, findings)
    if inventory is None:
        return findings
    nvml = RecordingClient()
    if not _system_rows(sampler, inventory, nvml, timeout_s, findings):
        return findings
    snapshot, hung = _sample(sampler, timeout_s)
    findings.migs = sampler.mig_identities()
    readings = {reading.identity.index: reading for reading in snapshot.devices} if snapshot else {}
    findings.unreadable = tuple(index for index, _ in inventory.failed)
    for index, reason in inventory.failed:
        findings.rows.append(_lost_row(index, reason))
    for device in inventory.devices:
        gpu = _Gpu(nvml, device, readings.get(device.identity.index), snapshot, sampler, timeout_s)
        _examine(gpu, hung, findings, counters, process_reads=config.process_attribution or config.process_metrics)
    return findings


def _initialise(sampler: Sampler, timeout_s: float, findings: NvmlFindings) -> Inventory | None:
    """NVML initialised and the inventory read, or None with the row saying why (a hang, or NVML's error)."""
    rows = findings.rows
    started = run_with_deadline(sampler.initialise, timeout_s, "doctor-nvml-init")
    if not started.finished:
        call = sampler.in_flight()
        name = call.function if call is not None else "nvmlInit"
        findings.hung = f"{name}{_on_gpu(call.gpu if call else None)} did not return within {timeout_s:g} s"
        if call is not None and call.gpu is not None:  # NVML started; reading a GPU's identity hangs
            rows.append(ok(SECTION, "library", "libnvidia-ml loaded and initialised"))
            rows.append(failed(gpu_section(call.gpu), "identity", findings.hung, HANG_HINT, index=call.gpu))
        else:
            rows.append(failed(SECTION, "library", findings.hung, HANG_HINT))
        return None
    if not started.value:
        status = sampler.snapshot.status
        error = status.nvml_error or (describe(started.error) if started.error else "unknown error")
        name = error.split(":", 1)[0]
        rows.append(failed(SECTION, "library", f"NVML did not start: {error}", NVML_HINTS.get(name, DEFAULT_NVML_HINT),
                           error=error))
        return None
    inventory = sampler.inventory
    assert inventory is not None  # initialise() returned True
    findings.nvml_up = True
    return inventory


def _system_rows(sampler: Sampler, inventory: Inventory, nvml: RecordingClient, timeout_s: float,
                 findings: NvmlFindings) -> bool:
    """The library, driver, CUDA and GPU-count rows; False when NVML found no GPU (nothing more to check)."""
    rows = findings.rows
    status = sampler.snapshot.status
    rows.append(ok(SECTION, "library", "libnvidia-ml loaded and initialised", nvml_version=status.nvml_version))
    rows.append(ok(SECTION, "driver", f"driver {status.driver_version}, NVML {status.nvml_version or 'unknown'}",
                   driver_version=status.driver_version, nvml_version=status.nvml_version))
    rows.append(_cuda_row(nvml, timeout_s))
    count = len(inventory.devices) + len(inventory.failed)
    if count == 0:
        rows.append(failed(SECTION, "gpus", "NVML found no GPU", NO_GPU_HINT, count=0))
        return False
    rows.append(ok(SECTION, "gpus", f"{count} GPU{'s' if count != 1 else ''} "
                   f"({', '.join(sorted({device.identity.model for device in inventory.devices})) or 'none readable'})",
                   count=count))
    findings.devices = tuple(device.identity for device in inventory.devices)
    return True


def _examine(gpu: _Gpu, hung: str, findings: NvmlFindings, counters: CounterSet | None, *, process_reads: bool) -> None:
    """One GPU's rows: its identity, then (unless a hang stopped the run or it is lost) its facts and counters.
    ``process_reads``: the exporter reads process lists (process attribution or the per-process series)."""
    rows = findings.rows
    identity = gpu.device.identity
    index = identity.index
    if hung and _hung_index(gpu.sampler) == index:
        findings.hung = hung
        rows.append(failed(gpu.section, "identity", f"{_identity_text(identity)}; {hung}", HANG_HINT,
                           **_identity_data(identity)))
        return
    if findings.hung or hung:
        rows.append(skipped(gpu.section, "identity", f"{_identity_text(identity)}; not checked further: "
                            f"{hung or findings.hung}", **_identity_data(identity)))
        return
    if gpu.reading is not None and not gpu.reading.up:
        rows.append(_lost_row(index, gpu.reading.error, identity))
        return
    rows.append(ok(gpu.section, "identity", _identity_text(identity), **_identity_data(identity)))
    gpu_rows, processes = _gpu_rows(gpu, counters, process_reads=process_reads)
    rows.extend(gpu_rows)
    if processes is not None:
        findings.processes[index] = processes
    if any(row.data.get("hung") for row in gpu_rows):
        findings.hung = next(row.detail for row in gpu_rows if row.data.get("hung"))


def _hung_index(sampler: Sampler) -> int | None:
    call = sampler.in_flight()
    return call.gpu if call is not None else None


def _cuda_row(nvml: NvmlClient, timeout_s: float) -> Row:
    outcome = run_with_deadline(lambda: int(nvml.call(pynvml.nvmlSystemGetCudaDriverVersion)), timeout_s)
    if not outcome.finished:
        return failed(SECTION, "cuda", f"nvmlSystemGetCudaDriverVersion did not return within {timeout_s:g} s",
                      HANG_HINT, hung=True)
    if outcome.error is not None or outcome.value is None:
        error = describe(outcome.error) if outcome.error else "no answer"
        return ok(SECTION, "cuda", f"CUDA driver version not reported ({error}); the exporter does not need it")
    return ok(SECTION, "cuda", f"CUDA driver {cuda_version_text(outcome.value)}", cuda_driver_version=outcome.value)


def _sample(sampler: Sampler, timeout_s: float) -> tuple[Snapshot | None, str]:
    """Two sampling cycles (a previous sample for rates and GPM); the hung call's description on a hang."""
    snapshot: Snapshot | None = None
    for cycle in range(CYCLES):
        if cycle:
            time.sleep(GPM_SAMPLE_GAP_S)
        outcome = run_with_deadline(sampler.run_cycle, timeout_s, "doctor-nvml-cycle")
        if not outcome.finished:
            call = sampler.in_flight()
            name = call.function if call is not None else "an NVML call"
            return snapshot, f"{name}{_on_gpu(call.gpu if call else None)} did not return within {timeout_s:g} s"
        if outcome.value is not None:
            snapshot = outcome.value
        if not sampler.snapshot.status.nvml_up:
            return snapshot, ""
    return snapshot, ""


def _on_gpu(index: int | None) -> str:
    return f" on GPU {index}" if index is not None else ""


def _identity_text(identity: DeviceIdentity) -> str:
    return (f"{identity.model}, {identity.uuid}, PCI {identity.pci_bus_id}, /dev/nvidia{identity.minor}")


def _identity_data(identity: DeviceIdentity) -> dict[str, Any]:
    return {"index": identity.index, "uuid": identity.uuid, "pci_bus_id": identity.pci_bus_id,
            "model": identity.model, "minor": identity.minor}


def _lost_row(index: int, reason: str, identity: DeviceIdentity | None = None) -> Row:
    text = f"{_identity_text(identity)}; " if identity else ""
    data = _identity_data(identity) if identity else {"index": index}
    return failed(gpu_section(index), "identity", f"{text}GPU not answering: {reason}", LOST_HINT, error=reason,
                  **data)


@dataclass
class _Gpu:
    """One GPU under examination: its device, this run's reading of it, and the doctor's NVML client."""

    nvml: RecordingClient
    device: Device
    reading: DeviceReading | None
    snapshot: Snapshot | None
    sampler: Sampler
    timeout_s: float
    xid_ok: bool = False

    @property
    def section(self) -> str:
        return gpu_section(self.device.identity.index)

    def guarded(self, check: str, probe: Callable[[], T], **data: Any) -> tuple[T | None, Row | None, bool]:
        """Run one probe under the deadline: (value, the row for an error or a hang, hung)."""
        outcome = run_with_deadline(probe, self.timeout_s, f"doctor-{check}")
        if not outcome.finished:
            text = f"{self.nvml.last_function} did not return within {self.timeout_s:g} s"
            return None, failed(self.section, check, text, HANG_HINT, hung=True, **data), True
        if outcome.error is not None:
            return None, _probe_error_row(self.section, check, self.nvml.last_function, outcome.error), False
        return outcome.value, None, False

    def row(self, check: str, probe: Callable[[], Row], **data: Any) -> tuple[Row, bool]:
        """A probe that produces its own row: that row, or the error/hang row instead; and whether it hung."""
        value, problem, hung = self.guarded(check, probe, **data)
        if problem is not None:
            return problem, hung
        assert value is not None  # a finished probe without an error returned its row
        return value, False


def _gpu_rows(gpu: _Gpu, counters: CounterSet | None, *,
              process_reads: bool) -> tuple[list[Row], tuple[GpuProcess, ...] | None]:
    rows: list[Row] = []
    facts: list[tuple[str, Callable[[], Row]]] = [("mig", lambda: _mig_row(gpu)), ("gpm", lambda: _gpm_row(gpu)),
                                                  ("events", lambda: _events_row(gpu))]
    for check, probe in facts:
        row, hung = gpu.row(check, probe)
        rows.append(row)
        if hung:
            return rows, None
    gpu.xid_ok = any(row.check == "events" and bool(row.data.get("xid")) for row in rows)
    listed, problem, hung = gpu.guarded("process list", lambda: _process_row(gpu, used=process_reads))
    processes: tuple[GpuProcess, ...] | None = None
    if problem is not None:
        rows.append(problem)
        if hung:
            return rows, None
    elif listed is not None:
        rows.append(listed[0])
        processes = listed[1]
    if counters is None:
        rows.append(skipped(gpu.section, "counters", "not checked: the counters CSV did not load"))
        return rows, processes
    for counter in (*counters.metrics, *counters.labels):
        row, hung = gpu.row(f"counter {counter.name}", partial(_counter_row, gpu, counter), kind="counter",
                            counter=counter.name, state="failing")
        rows.append(row)
        if hung:
            break
    return rows, processes


def _probe_error_row(section: str, check: str, function: str, error: BaseException) -> Row:
    kind = classify(error)
    text = f"{function}: {describe(error)}"
    if kind is ErrorClass.DEVICE_LOST:
        return failed(section, check, text, LOST_HINT, error=describe(error))
    return failed(section, check, text, FAILING_HINT, error=describe(error))


# -- per-GPU facts ----------------------------------------------------------------------------


def _mig_row(gpu: _Gpu) -> Row:
    nvml, device, sampler, section = gpu.nvml, gpu.device, gpu.sampler, gpu.section
    try:
        current, pending = nvml.call(pynvml.nvmlDeviceGetMigMode, device.handle)
    except pynvml.NVMLError as exc:
        if classify(exc) is ErrorClass.UNSUPPORTED:
            return ok(section, "mig", "MIG not supported on this GPU", mig="unsupported")
        raise
    instances = [mig for mig in sampler.mig_identities() if mig.parent_uuid == device.identity.uuid]
    pending_note = "" if int(pending) == int(current) else " (a change is pending a GPU reset)"
    if int(current) != pynvml.NVML_DEVICE_MIG_ENABLE:
        return ok(section, "mig", f"MIG disabled{pending_note}", mig="disabled")
    layout = ", ".join(f"{mig.profile} GI {mig.gpu_instance_id}/CI {mig.compute_instance_id}" for mig in instances)
    if not instances:
        return degraded(section, "mig", f"MIG enabled with no instance{pending_note}: no pod can use this GPU",
                        "create MIG instances (nvidia-smi mig -cgi ... -C, or the GPU Operator's MIG manager) "
                        "or disable MIG on this GPU", mig="enabled", instances=[])
    return ok(section, "mig", f"MIG enabled, {len(instances)} MIG device{'s' if len(instances) != 1 else ''}: "
              f"{layout}{pending_note}", mig="enabled", instances=[mig.uuid for mig in instances])


def _gpm_row(gpu: _Gpu) -> Row:
    nvml, device, section = gpu.nvml, gpu.device, gpu.section
    try:
        supported = GpmReader().probe(nvml, device.handle)
    except pynvml.NVMLError as exc:
        if not gpm_unsupported(exc):
            raise
        supported = False
    if supported:
        return ok(section, "gpm", "GPM supported: DCGM_FI_PROF_* rows are read from GPM", gpm=True)
    return ok(section, "gpm", "GPM not supported (Hopper or newer has it): DCGM_FI_PROF_* rows without a "
              "field-value fallback are omitted on this GPU", gpm=False)


def _bits(mask: int) -> list[int]:
    return [1 << bit for bit in range(mask.bit_length()) if mask & (1 << bit)]


def _events_row(gpu: _Gpu) -> Row:
    """Which of the exporter's event types this GPU supports, and whether registering them works."""
    nvml, device, section = gpu.nvml, gpu.device, gpu.section
    try:
        supported = int(nvml.call(pynvml.nvmlDeviceGetSupportedEventTypes, device.handle))
    except pynvml.NVMLError as exc:
        if classify(exc) is ErrorClass.UNSUPPORTED:
            return ok(section, "events", f"NVML events not supported on this GPU ({describe(exc)}): Xid rows stay 0",
                      xid=False, registered=[])
        raise
    mask = REQUESTED_EVENT_TYPES & supported
    names = [EVENT_TYPE_NAMES.get(bit, f"0x{bit:x}") for bit in _bits(mask)]
    if not mask:
        return ok(section, "events", "none of the event types the exporter watches is supported: Xid rows stay 0",
                  xid=False, registered=[])
    event_set = nvml.call(pynvml.nvmlEventSetCreate)
    try:
        nvml.call(pynvml.nvmlDeviceRegisterEvents, device.handle, mask, event_set)
    except pynvml.NVMLError as exc:
        if classify(exc) is ErrorClass.UNSUPPORTED:
            return ok(section, "events", f"event registration not supported ({describe(exc)}): Xid rows stay 0",
                      xid=False, registered=[])
        raise
    finally:
        nvml.call(pynvml.nvmlEventSetFree, event_set)
    xid = bool(mask & XID_EVENT)
    note = "" if xid else " (no Xid events on this GPU: Xid rows stay 0)"
    return ok(section, "events", f"registers {', '.join(names)}{note}", xid=xid, registered=names)


def _process_row(gpu: _Gpu, *, used: bool) -> tuple[Row, tuple[GpuProcess, ...] | None]:
    nvml, device, section = gpu.nvml, gpu.device, gpu.section
    pids: dict[int, GpuProcess] = {}
    errors: list[str] = []
    for function in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
        try:
            listed = nvml.call(function, device.handle)
        except Exception as exc:  # NVMLLibraryMismatchError is not an NVMLError
            if classify(exc) in (ErrorClass.DEVICE_LOST, ErrorClass.NVML_DOWN):
                raise
            errors.append(f"{getattr(function, '__name__', 'nvml')}: {describe(exc)}")
            continue
        for process in listed:
            pids.setdefault(int(process.pid), GpuProcess(int(process.pid), process.usedGpuMemory))
    processes = tuple(sorted(pids.values(), key=lambda process: process.pid))
    shown = ", ".join(str(process.pid) for process in processes[:8]) + (" ..." if len(processes) > 8 else "")
    listed_text = f"{len(processes)} GPU process{'es' if len(processes) != 1 else ''}" + (f" (PIDs {shown})"
                                                                                          if processes else "")
    if errors and not processes and len(errors) == 2:
        text = f"NVML refuses the process lists: {'; '.join(errors)}"
        if not used:
            return ok(section, "process list", f"{text}; not used (process attribution is off)",
                      readable=False), None
        return failed(section, "process list", text,
                      "per-container GPU memory needs the process lists: run the exporter as root (the chart's "
                      "default with Kubernetes) on a driver that supports them", readable=False), None
    note = "" if used else "; not used (process attribution is off)"
    partial = f" ({'; '.join(errors)})" if errors else ""
    return ok(section, "process list", f"{listed_text}{partial}{note}", readable=True,
              pids=[process.pid for process in processes]), processes


# -- counter rows -----------------------------------------------------------------------------


def _counter_value(spec: FieldSpec, reading: DeviceReading | None) -> float | None:
    if reading is None:
        return None
    value = reading.values.get(spec.name)
    if value is None:
        value = next((mig.values[spec.name] for mig in reading.mig if spec.name in mig.values), None)
    return value


def _counter_row(gpu: _Gpu, row: CounterRow) -> Row:
    section = gpu.section
    check = f"counter {row.name}"
    spec = row.spec
    base: dict[str, Any] = {"kind": "counter", "counter": row.name, "source": spec.nvml_source}
    if spec.is_label:
        label = spec.read.label(gpu.device.identity, gpu.snapshot.status if gpu.snapshot is not None else None)
        if label:
            return ok(section, check, f"label {label!r}", state="served", value=label, **base)
        return ok(section, check, "not supported on this GPU (empty: no InfoROM); the label is omitted",
                  state="unsupported", **base)
    if spec.read.produced_by is not None:
        return _exporter_row(gpu, check, spec, spec.read.produced_by, base)
    value = _counter_value(spec, gpu.reading)
    if value is not None:
        return ok(section, check, f"served: {_number(value)} {spec.unit}".rstrip(), state="served", value=value,
                  **base)
    return _unserved_row(section, check, explain(gpu.nvml, gpu.device, spec), base)


def _exporter_row(gpu: _Gpu, check: str, spec: FieldSpec, component: str, base: dict[str, Any]) -> Row:
    section = gpu.section
    if component == "xid":
        if gpu.xid_ok:
            return ok(section, check, "served: counted from NVML Xid events", state="served", **base)
        return ok(section, check, "not supported on this GPU: no Xid events (see the events row); the series "
                  "stays at 0", state="unsupported", **base)
    needed = [CATALOG.lookup(name) for name in spec.needs]
    missing = [need for need in needed if need is not None and _counter_value(need, gpu.reading) is None]
    if not missing:
        return ok(section, check, f"served: computed from {', '.join(spec.needs) or component}",
                  state="served", **base)
    return _unserved_row(section, check, explain(gpu.nvml, gpu.device, missing[0]), base)


def _unserved_row(section: str, check: str, probe: _Probe, base: dict[str, Any]) -> Row:
    if probe.error is None:
        return degraded(section, check, f"no value yet although {probe.function} answers", NO_VALUE_HINT,
                        state="no-value", **base)
    error = describe(probe.error)
    if probe.kind is ErrorClass.UNSUPPORTED:
        return ok(section, check, f"not supported on this GPU ({probe.function}: {error}); the series is omitted",
                  state="unsupported", error=error, **base)
    hint = LOST_HINT if probe.kind is ErrorClass.DEVICE_LOST else FAILING_HINT
    return failed(section, check, f"failing: {probe.function}: {error}", hint, state="failing", error=error, **base)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def explain(nvml: RecordingClient, device: Device, spec: FieldSpec) -> _Probe:
    """Ask NVML once more for the source of ``spec`` on this GPU; the error (if any) says why it has no value."""
    read = spec.read
    handle = device.handle
    try:
        for name in read.queries:
            QUERIES[name].run(nvml, handle, QueryState())
        if read.field_keys:
            _field_status(nvml, handle, read.field_keys)
        if read.gpm_metric is not None:
            _gpm_status(nvml, handle, read.fallback_keys)
    except Exception as exc:  # noqa: BLE001 - the error is the finding
        return _Probe(nvml.last_function or spec.nvml_source, exc)
    return _Probe(nvml.last_function or spec.nvml_source)


def _gpm_status(nvml: RecordingClient, handle: Any, fallback_keys: Sequence[FieldKey]) -> None:
    """Raise NotSupported for a GPU without GPM unless the row's field-value fallback answers."""
    support = nvml.call(pynvml.nvmlGpmQueryDeviceSupport, handle)
    if support.isSupportedDevice:
        return
    if fallback_keys:
        _field_status(nvml, handle, fallback_keys)
        return
    nvml.last_function = "nvmlGpmQueryDeviceSupport (no GPM on this GPU)"
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def _field_status(nvml: RecordingClient, handle: Any, keys: Sequence[tuple[int, int]]) -> None:
    """Raise the first per-entry error of a field-value read (field values never raise per field)."""
    entries = nvml.call(pynvml.nvmlDeviceGetFieldValues, handle, list(keys))
    for entry in entries:
        if entry.nvmlReturn != pynvml.NVML_SUCCESS:
            nvml.last_function = f"nvmlDeviceGetFieldValues(field {entry.fieldId})"
            raise pynvml.NVMLError(entry.nvmlReturn)
