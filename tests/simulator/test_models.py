"""GPU model presets: consistent numbers and the support matrix of each kind of board."""

from __future__ import annotations

import pytest

from simulator.models import DEFAULT_MODEL, PRESETS, preset_names


@pytest.mark.parametrize("key", preset_names())
def test_preset_numbers_are_consistent(key: str) -> None:
    model = PRESETS[key]
    assert 0 < model.memory_reserved < model.memory_total / 10
    assert model.power_min_limit_mw <= model.power_default_limit_mw <= model.power_max_limit_mw
    assert model.power_idle_mw < model.power_busy_mw <= model.power_default_limit_mw
    assert model.idle_sm_clock < model.max_sm_clock
    assert model.idle_memory_clock <= model.max_memory_clock
    assert model.temp_idle < model.temp_busy < model.temp_gpu_max < model.temp_slowdown < model.temp_shutdown
    assert model.name.startswith(("NVIDIA ", "Tesla "))
    assert len(model.name) < 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE


def test_default_model_is_a_preset() -> None:
    assert DEFAULT_MODEL in PRESETS


def test_support_matrix_follows_the_board_kind() -> None:
    geforce, hopper, volta, l4 = (PRESETS[k] for k in ("RTX-4090", "H100-SXM5-80GB", "V100-SXM2-32GB", "L4"))
    assert not geforce.features.ecc and not geforce.features.serial_number and geforce.features.fans
    assert not geforce.features.memory_temperature and not geforce.features.nvlink_links
    assert hopper.features.mig and hopper.features.nvlink_links == 18 and not hopper.features.fans
    assert hopper.features.row_remapping and not hopper.features.page_retirement
    assert volta.features.page_retirement and not volta.features.row_remapping and not volta.features.mig
    assert not l4.features.memory_temperature and not l4.features.mig and l4.features.ecc
