"""dcgm-exporter 4.8.3's --config-file YAML (version 1) is read, and refused with file:line when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import ConfigError, load_config
from exporter.metrics.counters import parse_counters


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "dcgm-exporter.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_metrics_file_and_collection_interval_map_to_collectors_and_interval(tmp_path: Path) -> None:
    path = _write(tmp_path, "version: 1\nmetrics:\n  file: /etc/dcgm-exporter/dcp-metrics-included.csv\n"
                            "collection:\n  interval: 30000\n")
    config = load_config(["--config-file", path], {})
    assert config.collectors == "/etc/dcgm-exporter/dcp-metrics-included.csv"
    assert config.collect_interval_ms == 30000
    assert config.sources["collect_interval_ms"] == f"{path}:5"
    assert load_config([], {"DCGM_EXPORTER_CONFIG_FILE": path, "DCGM_EXPORTER_INTERVAL": "2000"}) \
        .collect_interval_ms == 2000  # environment over the file, as upstream


def test_inline_fields_become_the_counters(tmp_path: Path) -> None:
    path = _write(tmp_path, "version: 1\nmetrics:\n  fields:\n"
                            "    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: 'Temperature, in C.'}\n"
                            "    - name: DCGM_FI_DEV_XID_ERRORS\n      prometheusType: gauge\n      help: Last Xid\n")
    config = load_config(["--config-file", path], {})
    counters = parse_counters(config.inline_counters, config.inline_counters_source)
    assert [(row.name, row.prom_type, row.help) for row in counters.metrics] == [
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "Temperature, in C."), ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Last Xid")]
    assert load_config(["--config-file", path, "-f", "/x.csv"], {}).inline_counters == ""  # the flag wins


def test_watch_groups_are_validated_and_their_intervals_noted(tmp_path: Path) -> None:
    path = _write(tmp_path, "version: 1\ncollection:\n  interval: 10s\n  watchGroups:\n"
                            "    - {name: slow, interval: 60000, fields: [DCGM_FI_DEV_ECC_DBE_VOL_TOTAL]}\n")
    config = load_config(["--config-file", path], {})
    assert config.collect_interval_ms == 10000
    assert len(config.notes) == 1
    assert config.notes[0].startswith(f"{path}:4: collection.watchGroups: per-group intervals are not used here")


@pytest.mark.parametrize(("text", "message"), [
    ("version: 2\n", ":1: version: unsupported version 2"),
    ("version: 1\nserver: {}\n", ":2: server: unknown key"),
    ("version: 1\nmetrics:\n  file: a.csv\n  filez: b\n", ":4: metrics.filez: unknown key"),
    ("version: 1\ncollection:\n  interval: soon\n", ":3: collection.interval: invalid duration 'soon'"),
    ("version: 1\nmetrics:\n  fields:\n    - {name: X, help: h}\n", ":4: metrics.fields[].prometheusType: missing"),
])
def test_mistakes_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(["--config-file", path], {})
    assert str(caught.value).startswith(path + message), str(caught.value)
