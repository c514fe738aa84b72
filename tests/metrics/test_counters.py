"""dcgm-exporter's counters CSV: a user's existing file must load; mistakes must be clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.metrics.counters import BUILTIN_NAME, CounterFileError, load_counters, parse_counters

FIXTURES = Path(__file__).parent.parent / "fixtures"
DCGM_48_DEFAULT = FIXTURES / "dcgm-exporter-4.8-default-counters.csv"


def test_the_builtin_default_loads_every_row_as_a_metric_or_label() -> None:
    counters = load_counters(None)
    assert counters.source == BUILTIN_NAME
    names = [row.name for row in counters.metrics]
    assert names[:4] == ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
                         "DCGM_FI_DEV_GPU_TEMP"]
    assert [row.name for row in counters.labels] == ["DCGM_FI_DRIVER_VERSION"]
    energy = next(row for row in counters.metrics if row.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert energy.prom_type == "counter"
    assert energy.help == "Total energy consumption since boot (in mJ)."


def test_a_users_dcgm_exporter_48_file_loads_with_warnings_for_fields_nvml_cannot_serve() -> None:
    counters = load_counters(str(DCGM_48_DEFAULT))
    names = {row.name for row in counters.metrics}
    assert {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_FB_RESERVED",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE"} <= names
    # The stray space in "DCGM_FI_DEV_DEC_UTIL ," is trimmed, as dcgm-exporter does.
    assert "DCGM_FI_DEV_DEC_UTIL" in names
    assert [row.name for row in counters.labels] == ["DCGM_FI_DRIVER_VERSION"]
    warned = "\n".join(counters.warnings)
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" in warned
    for warning in counters.warnings:
        assert warning.startswith(f"{DCGM_48_DEFAULT}:"), warning
    # One warning per skipped field, never one per GPU or per cycle.
    assert len(counters.warnings) == len({w.split(": ")[1] for w in counters.warnings})


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge", "bad.csv:3: DCGM_FI_DEV_GPU_TEMP: expected 3 columns"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temp, in C", "found 4 — quote help text that contains commas"),
        ("DCGM_FI_DEV GPU_TEMP, gauge, GPU temperature", "DCGM_FI_DEV GPU_TEMP: not a DCGM field name"),
        ("foo, gauge, something", "foo: not a DCGM field name"),
        ("dcgm_fi_dev_gpu_temp, gauge, GPU temperature", "not a DCGM field name"),
        ("DCGM_FI_DEV_GPU_TEMP, gaug, GPU temperature", "DCGM_FI_DEV_GPU_TEMP: unknown Prometheus type 'gaug'"),
        ("DCGM_FI_DEV_GPU_TEMP, label, GPU temperature", "type 'label' does not fit this field"),
        ('DCGM_FI_DEV_GPU_TEMP, gauge, "unterminated', "bad.csv:3: row: malformed CSV"),
    ],
)
def test_a_broken_line_is_an_error_naming_file_line_and_key(line: str, expected: str) -> None:
    text = f"# comment\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock (in MHz).\n{line}\n"
    with pytest.raises(CounterFileError) as caught:
        parse_counters(text, "bad.csv")
    assert expected in str(caught.value)
    assert str(caught.value).startswith("bad.csv:3:")


def test_quoted_help_text_may_contain_commas_and_comment_lines_need_no_columns() -> None:
    counters = parse_counters('# Clocks,,\n#\nDCGM_FI_DEV_SM_CLOCK, gauge, "SM clock, in MHz."\n', "x.csv")
    assert counters.metrics[0].help == "SM clock, in MHz."


def test_duplicates_warn_and_keep_the_first_row() -> None:
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, first\nDCGM_FI_DEV_GPU_TEMP, gauge, second\n", "d.csv")
    assert [row.help for row in counters.metrics] == ["first"]
    assert counters.warnings == ("d.csv:2: DCGM_FI_DEV_GPU_TEMP: duplicate of line 1; the row is skipped",)
    assert dict(counters.skipped) == {"unknown_field": 0, "not_readable_through_nvml": 0, "duplicate": 1}


def test_a_dcgm_shaped_name_no_release_we_know_has_is_skipped_with_one_warning_not_an_error() -> None:
    """A newer DCGM's field (or a typo of a known one) never stops the exporter: one warning naming file:line,
    the field and why, offering the closest known name; the other rows are exported."""
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, ok\n"
                              "DCGM_FI_DEV_GPU_TMP, gauge, GPU temperature\n"
                              "DCGM_FI_DEV_SOMETHING_FROM_DCGM_5, gauge, a field of a future release\n"
                              "DCGM_EXP_NEW_COLLECTOR, gauge, a future dcgm-exporter metric\n", "new.csv")
    assert [row.name for row in counters.metrics] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert counters.warnings[0] == (
        "new.csv:2: DCGM_FI_DEV_GPU_TMP: not a field of any DCGM release this exporter knows (newest known "
        "dcgm-exporter: 4.6.1-4.8.4): a newer DCGM's field, or a typo — did you mean DCGM_FI_DEV_GPU_TEMP?; "
        "the row is skipped")
    assert counters.warnings[1].startswith("new.csv:3: DCGM_FI_DEV_SOMETHING_FROM_DCGM_5: not a field of any DCGM")
    assert counters.warnings[2].startswith("new.csv:4: DCGM_EXP_NEW_COLLECTOR: not a field of any DCGM")
    assert dict(counters.skipped) == {"unknown_field": 3, "not_readable_through_nvml": 0, "duplicate": 0}


def test_dcgm_exporter_483s_commented_prof_total_rows_load_when_uncommented() -> None:
    """4.8.3's CSV and chart carry DCGM_FI_PROF_*_TOTAL rows commented out; users uncomment them (the names
    here have that shape; the exact 4.8.3 rows were not retrievable when this was written)."""
    text = ("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
            "DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL, counter, Total number of bytes transmitted through PCIe TX.\n"
            "DCGM_FI_PROF_NVLINK_RX_BYTES_TOTAL, counter, Total number of bytes received through NVLink RX.\n")
    counters = parse_counters(text, "values.yaml counters")
    assert [row.name for row in counters.metrics] == ["DCGM_FI_DEV_GPU_UTIL"]
    assert [warning.split(": ")[0] for warning in counters.warnings] == ["values.yaml counters:2",
                                                                         "values.yaml counters:3"]
    assert counters.skipped["unknown_field"] == 2


def test_known_fields_we_cannot_read_keep_their_warning_and_are_counted() -> None:
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU\n"
                              "DCGM_FI_DEV_BAR1_USED, gauge, BAR1\n", "k.csv")
    assert counters.warnings[0].startswith("k.csv:2: DCGM_FI_DEV_VGPU_LICENSE_STATUS: not served by this exporter")
    assert counters.warnings[1] == ("k.csv:3: DCGM_FI_DEV_BAR1_USED: this DCGM field cannot be read through NVML by "
                                    "this exporter; the row is skipped")
    assert dict(counters.skipped) == {"unknown_field": 0, "not_readable_through_nvml": 2, "duplicate": 0}


def test_dcgm_47_canonical_names_are_accepted_and_exported_as_written() -> None:
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, GPU temperature (in C).\n"
                              "DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver Version\n", "v49.csv")
    assert counters.metrics[0].name == "DCGM_FI_DEV_GPU_TEMP_CELSIUS"
    assert counters.metrics[0].spec.name == "DCGM_FI_DEV_GPU_TEMP"
    assert counters.labels[0].name == "DCGM_FI_SYSTEM_DRIVER_VERSION"
