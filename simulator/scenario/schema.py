"""The scenario file's schema as users read it (``SCHEMA``: the simulator's ``--help`` and docs quote it)."""

from __future__ import annotations

SCHEMA = """\
description: str                      # optional; what the scenario shows
seed: int                             # default 0; drives UUIDs, serials and all noise
driver: {version: "550.90.07", nvml_version: "12.550.90.07", cuda_version: 12040 | "12.4"}
gpu_count: int                        # default 1 (1..1024)
gpu_defaults: GPU                     # settings applied to every GPU
gpus: {INDEX: GPU, ...}               # per-GPU overrides by NVML index (< gpu_count)
latency_profile: none | realistic | FILE.json   # default none; a .json file measured by scripts/test-gpu
                                      # (relative to this file) replaces the realistic estimates it covers
latency: {SYMBOL: DURATION, field_value: DURATION}   # per-call overrides; field_value = per entry
library:
  missing: bool                       # nvmlInitWithFlags -> NVML_ERROR_LIBRARY_NOT_FOUND forever
  missing_symbols: [SYMBOL, ...]      # absent from the library -> NVMLError_FunctionNotFound
  init_fails: {error: CODE, until: DURATION, calls: int}   # init fails while either holds
faults:
  - {type: error, symbol: SYMBOL, error: CODE, gpu: int, from: DURATION, until: DURATION, field: int}
  - {type: gpu_lost, gpu: int, at: DURATION, until: DURATION}   # until: answers again (reset)
  - {type: hang, symbol: SYMBOL, gpu: int, at: DURATION, duration: DURATION,
     holds_driver_lock: bool, error: CODE}
kubernetes: any                       # reserved: stored raw for the kubelet/API-server fakes
xid_events:                           # Xids the NVML event set delivers (to sets registered before `at`)
  - {gpu: int | [int, ...], xid: int, at: DURATION, count: int, over: DURATION,
     gpu_instance: int, compute_instance: int}   # count events spread evenly over `over` (a burst);
                                                 # gpu_instance/compute_instance: a MIG attribution

GPU:
  model: H100-SXM5-80GB | H200-SXM-141GB | A100-SXM4-80GB | L4 | RTX-4090 | V100-SXM2-32GB
  name: str, uuid: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", serial: str, vbios: str
  pci_bus_id: "00000000:18:00.0", minor: int, power_limit: POWER
  features: {ecc, memory_temperature, row_remapping, page_retirement, energy_counter, encoder,
             decoder, mig, serial_number, clock_event_reasons, violation_counters, tlimit_fields,
             pcie_byte_counters, power_usage, gpm: bool; fans, nvlink_links: int}
  load, memory_util, encoder_util, decoder_util, fan: PATTERN of percent
  memory_used: PATTERN of SIZE ("40GiB", "512MiB", bytes, or "60%" of total)
  temperature, memory_temperature: PATTERN of degrees C
  power: PATTERN of POWER ("350W", "0.35kW", watts)
  sm_clock, memory_clock: PATTERN of MHz;  pstate: PATTERN of 0..15 or "P0".."P15"
  nvlink_tx, nvlink_rx, pcie_tx, pcie_rx: PATTERN of RATE ("40GB/s", "1.5GiB/s", bytes/s)
  clock_events: [{reason: REASON, from: DURATION, until: DURATION | for: DURATION, every: DURATION}]
  pcie_replays: COUNTER
  ecc_errors: {corrected: COUNTER, uncorrected: COUNTER, aggregate_corrected: int,
               aggregate_uncorrected: int}
  retired_pages: {single_bit: COUNTER, double_bit: COUNTER, pending: FLAG}
  remapped_rows: {correctable: COUNTER, uncorrectable: COUNTER, pending: FLAG, failure: FLAG}
  processes: [{pid: int, used_memory: SIZE | unavailable, type: compute | graphics | both,
               from: DURATION, until: DURATION | for: DURATION, every: DURATION,
               load, memory_util, encoder_util, decoder_util: PATTERN of percent}]
                                      # a process's own activity (what NVML's per-process utilization
                                      # samples report); when any process of a GPU has some, the GPU's
                                      # load/memory_util/encoder_util/decoder_util follow its processes
                                      # (see sharing); otherwise its processes share the GPU's equally
  fabric: none | healthy | degraded | unhealthy   # NVLink fabric (nvmlDeviceGetGpuFabricInfoV): none (default,
                                      # NotSupported: not on an NVLink fabric); healthy; degraded (bandwidth
                                      # degraded, summary limited capacity); unhealthy (route unhealthy)
  sharing: time-slicing | mps         # default time-slicing: processes take turns, so the GPU is busy
                                      # the sum of their times (at most 100 %); mps: their kernels run
                                      # at once, busy 1 - prod(1 - each), less than the sum
  mig: [MIG_INSTANCE, ...]            # MIG enabled with these GPU instances ([]: enabled, none created);
                                      # on a MIG GPU the parent's load/memory follow its instances
  profiling: {workload: training | inference | hpc | graphics,   # GPM counters (features.gpm)
              gr_active, sm_active, sm_occupancy, tensor_active, dram_active, fp64_active, fp32_active,
              fp16_active: PATTERN of percent}   # explicit channels override the workload mix

MIG_INSTANCE: a profile name ("1g.10gb", "3g.40gb", ... of the GPU's model), or
  {profile: PROFILE, compute_instances: int, load: PATTERN of percent, memory_used: PATTERN of SIZE,
   workload: training | inference | hpc | graphics, processes: [PROCESS, ...]}

PATTERN: a plain value (constant) or {pattern: KIND, ..., jitter: AMOUNT, jitter_period: DURATION}
  constant: value | sine: low, high, period, phase | square: low, high, period, duty, phase
  steps: steps: [[AT, VALUE], ...], every | ramp: from, to, duration, start, repeat: bool
  noise: low, high, period
COUNTER: int, or {start: int, steps: [[AT, ADD], ...], rate: PATTERN of events per second}
FLAG: bool, a window {from, until | for, every}, or a list of windows
DURATION: "4.5ms", "137us", "30s", "2m", "1h", or a number of seconds
CODE: an NVML error name ("NotSupported", "GpuIsLost", "NVML_ERROR_TIMEOUT") or number
"""
