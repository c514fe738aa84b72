"""How long each simulated NVML call takes under the ``realistic`` latency profile, and what a scenario may name."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# Every C symbol the fake implements, with the latency the ``realistic`` profile injects (seconds).
# Measured figures come from flightlessmango/MangoHud#2104 (RTX 4090 laptop,
# driver 610.57.04, medians); everything marked "estimate" is a plausible guess for a datacenter
# GPU with persistence mode on, to be replaced when someone measures it on real hardware.
REALISTIC_LATENCY_S: Mapping[str, float] = MappingProxyType({
    "nvmlInitWithFlags": 50e-3,  # estimate (persistence mode on; seconds without it)
    "nvmlInit_v2": 50e-3,  # estimate
    "nvmlShutdown": 5e-3,  # estimate
    "nvmlErrorString": 0.2e-6,  # estimate (table lookup)
    "nvmlSystemGetDriverVersion": 1e-6,  # estimate (cached by the library)
    "nvmlSystemGetNVMLVersion": 1e-6,  # estimate
    "nvmlSystemGetCudaDriverVersion": 1e-6,  # estimate
    "nvmlSystemGetCudaDriverVersion_v2": 30e-6,  # estimate (asks libcuda)
    "nvmlDeviceGetCount_v2": 1e-6,  # estimate
    "nvmlDeviceGetHandleByIndex_v2": 2e-6,  # estimate
    "nvmlDeviceGetHandleByUUID": 20e-6,  # estimate (DRA driver notes it "can be slow" under load)
    "nvmlDeviceGetHandleByPciBusId_v2": 20e-6,  # estimate
    "nvmlDeviceGetIndex": 1e-6,  # estimate
    "nvmlDeviceGetUUID": 1e-6,  # estimate
    "nvmlDeviceGetName": 1e-6,  # estimate
    "nvmlDeviceGetPciInfo_v3": 2e-6,  # estimate
    "nvmlDeviceGetMinorNumber": 1e-6,  # estimate
    "nvmlDeviceGetSerial": 2e-6,  # estimate
    "nvmlDeviceGetVbiosVersion": 2e-6,  # estimate
    "nvmlDeviceGetBrand": 1e-6,  # estimate
    "nvmlDeviceGetArchitecture": 1e-6,  # estimate
    "nvmlDeviceGetCudaComputeCapability": 1e-6,  # estimate
    "nvmlDeviceGetUtilizationRates": 2.5e-6,  # measured
    "nvmlDeviceGetEncoderUtilization": 3e-6,  # estimate
    "nvmlDeviceGetDecoderUtilization": 3e-6,  # estimate
    "nvmlDeviceGetMemoryInfo": 11.6e-6,  # measured
    "nvmlDeviceGetMemoryInfo_v2": 11.6e-6,  # estimate (same RM query as v1)
    "nvmlDeviceGetBAR1MemoryInfo": 10e-6,  # estimate
    "nvmlDeviceGetTemperatureV": 25e-6,  # estimate
    "nvmlDeviceGetTemperature": 25e-6,  # estimate
    "nvmlDeviceGetTemperatureThreshold": 5e-6,  # estimate
    "nvmlDeviceGetPowerUsage": 40e-6,  # estimate
    "nvmlDeviceGetPowerManagementLimit": 5e-6,  # estimate
    "nvmlDeviceGetEnforcedPowerLimit": 5e-6,  # estimate
    "nvmlDeviceGetPowerManagementDefaultLimit": 5e-6,  # estimate
    "nvmlDeviceGetTotalEnergyConsumption": 40e-6,  # estimate
    "nvmlDeviceGetClockInfo": 10e-6,  # estimate
    "nvmlDeviceGetMaxClockInfo": 2e-6,  # estimate
    "nvmlDeviceGetPcieReplayCounter": 20e-6,  # estimate
    "nvmlDeviceGetFanSpeed": 137e-6,  # measured
    "nvmlDeviceGetNumFans": 5e-6,  # estimate
    "nvmlDeviceGetPerformanceState": 5e-6,  # estimate
    "nvmlDeviceGetCurrentClocksEventReasons": 10e-6,  # estimate
    "nvmlDeviceGetSupportedClocksEventReasons": 2e-6,  # estimate
    "nvmlDeviceGetEccMode": 5e-6,  # estimate
    "nvmlDeviceGetTotalEccErrors": 20e-6,  # estimate
    "nvmlDeviceGetRetiredPages": 30e-6,  # estimate
    "nvmlDeviceGetRetiredPages_v2": 30e-6,  # estimate
    "nvmlDeviceGetRetiredPagesPendingStatus": 10e-6,  # estimate
    "nvmlDeviceGetRemappedRows": 30e-6,  # estimate
    "nvmlDeviceGetComputeRunningProcesses_v3": 4.491e-3,  # measured (graphics list, same path)
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 4.491e-3,  # measured
    # Per-process utilization samples: no published figure. Estimate: a quarter of the process-list
    # query (it reads RM's per-process sample buffer), per C call; pynvml makes two per read.
    "nvmlDeviceGetProcessUtilization": 1.0e-3,  # estimate
    "nvmlDeviceGetProcessesUtilizationInfo": 1.0e-3,  # estimate
    "nvmlDeviceGetPcieThroughput": 0.0,  # its 20 ms sampling window is always simulated
    "nvmlDeviceGetMaxMigDeviceCount": 2e-6,  # estimate
    "nvmlDeviceGetMigMode": 5e-6,  # estimate
    "nvmlDeviceGetMigDeviceHandleByIndex": 5e-6,  # estimate (DRA driver: a full MIG walk under load "O(10 s)")
    "nvmlDeviceIsMigDeviceHandle": 1e-6,  # estimate
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": 1e-6,  # estimate
    "nvmlDeviceGetGpuInstanceId": 2e-6,  # estimate
    "nvmlDeviceGetComputeInstanceId": 2e-6,  # estimate
    "nvmlDeviceGetAttributes_v2": 5e-6,  # estimate
    "nvmlDeviceGetGpuFabricInfoV": 5e-6,  # estimate (the driver's cached fabric probe result)
    "nvmlGpmQueryDeviceSupport": 5e-6,  # estimate
    "nvmlGpmSampleAlloc": 2e-6,  # estimate (host memory only)
    "nvmlGpmSampleFree": 1e-6,  # estimate
    "nvmlGpmSampleGet": 50e-6,  # estimate (reads the perf-monitor counters through RM)
    "nvmlGpmMigSampleGet": 50e-6,  # estimate
    "nvmlGpmMetricsGet": 10e-6,  # estimate (host-side arithmetic on two samples)
    "nvmlDeviceGetFieldValues": 10e-6,  # estimate: per call, plus FIELD_VALUE_LATENCY per entry
    # NVML events (the wait's own blocking is simulated separately; this is the call overhead)
    "nvmlEventSetCreate": 5e-6,  # estimate
    "nvmlEventSetFree": 5e-6,  # estimate
    "nvmlDeviceGetSupportedEventTypes": 2e-6,  # estimate
    "nvmlDeviceRegisterEvents": 50e-6,  # estimate
    "nvmlEventSetWait_v2": 5e-6,  # estimate
})
REALISTIC_FIELD_VALUE_LATENCY_S = 5e-6  # estimate, per requested field
FIELD_VALUE_LATENCY_KEY = "field_value"

NVML_SYMBOLS: frozenset[str] = frozenset(REALISTIC_LATENCY_S)

LATENCY_PROFILES = ("none", "realistic")
