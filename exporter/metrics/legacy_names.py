"""dcgm-exporter 1.x metric names (``dcgm_sm_clock``, ...) and the DCGM field each one reads.

dcgm-exporter ships ``etc/1.x-compatibility-metrics.csv`` for users of its 1.x names (used with
``-o/--use-old-namespace``); its first column is one of these names instead of a ``DCGM_FI_*``
name, and go-dcgm resolves them through its ``pkg/dcgm/legacy_fields.csv`` (41 names, e.g.
``dcgm_sm_clock`` 100, ``dcgm_gpu_utilization`` 203, ``dcgm_fb_used`` 252). The
catalog accepts them as aliases of the field with that id, so such a CSV loads unchanged and
its metrics keep their 1.x names (column 1 is the metric name, as always).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# 1.x name -> DCGM field id (go-dcgm pkg/dcgm/legacy_fields.csv, the lower-case rows).
ONE_X_FIELD_IDS: Mapping[str, int] = MappingProxyType({
    "dcgm_sm_clock": 100,
    "dcgm_memory_clock": 101,
    "dcgm_memory_temp": 140,
    "dcgm_gpu_temp": 150,
    "dcgm_power_usage": 155,
    "dcgm_total_energy_consumption": 156,
    "dcgm_pcie_tx_throughput": 200,
    "dcgm_pcie_rx_throughput": 201,
    "dcgm_pcie_replay_counter": 202,
    "dcgm_gpu_utilization": 203,
    "dcgm_mem_copy_utilization": 204,
    "dcgm_enc_utilization": 206,
    "dcgm_dec_utilization": 207,
    "dcgm_xid_errors": 230,
    "dcgm_power_violation": 240,
    "dcgm_thermal_violation": 241,
    "dcgm_sync_boost_violation": 242,
    "dcgm_board_limit_violation": 243,
    "dcgm_low_util_violation": 244,
    "dcgm_reliability_violation": 245,
    "dcgm_fb_free": 251,
    "dcgm_fb_used": 252,
    "dcgm_ecc_sbe_volatile_total": 310,
    "dcgm_ecc_dbe_volatile_total": 311,
    "dcgm_ecc_sbe_aggregate_total": 312,
    "dcgm_ecc_dbe_aggregate_total": 313,
    "dcgm_retired_pages_sbe": 390,
    "dcgm_retired_pages_dbe": 391,
    "dcgm_retired_pages_pending": 392,
    "dcgm_nvlink_flit_crc_error_count_total": 409,
    "dcgm_nvlink_data_crc_error_count_total": 419,
    "dcgm_nvlink_replay_error_count_total": 429,
    "dcgm_nvlink_recovery_error_count_total": 439,
    "dcgm_nvlink_bandwidth_total": 449,
    "dcgm_fi_prof_gr_engine_active": 1001,
    "dcgm_fi_prof_sm_active": 1002,
    "dcgm_fi_prof_sm_occupancy": 1003,
    "dcgm_fi_prof_pipe_tensor_active": 1004,
    "dcgm_fi_prof_dram_active": 1005,
    "dcgm_fi_prof_pcie_tx_bytes": 1009,
    "dcgm_fi_prof_pcie_rx_bytes": 1010,
})
