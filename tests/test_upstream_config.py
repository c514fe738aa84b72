"""dcgm-exporter's --config-file YAML (version 1 of 4.8.3 and 4.8.4, version 2 of 4.8.4) is read, and refused
with file:line when wrong. The chart README example of 4.8.4 is read as it is."""

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
    ("version: 3\n", ":1: version: unsupported version 3"),
    ("version: 1\nservers: {}\n", ":2: servers: unknown key"),
    ("version: 2\ncollection:\n  interval: 30s\n", ":2: collection: a version 1 key: the two versions cannot"),
    ("version: 1\ncollections: []\n", ":2: collections: a version 2 key: the two versions cannot"),
    ("version: 2\ncollections:\n  - {name: s, every: often, metrics: {include: ['*']}}\n",
     ":3: collections[].every: invalid duration 'often'"),
    ("version: 2\nsources:\n  dcgm:\n    watch: {maxKeepAge: ever}\n", ":4: maxKeepAge: invalid duration"),
    ("version: 1\nmetrics:\n  file: a.csv\n  filez: b\n", ":4: metrics.filez: unknown key"),
    ("version: 1\ncollection:\n  interval: soon\n", ":3: collection.interval: invalid duration 'soon'"),
    ("version: 1\nmetrics:\n  fields:\n    - {name: X, help: h}\n", ":4: metrics.fields[].prometheusType: missing"),
])
def test_mistakes_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(["--config-file", path], {})
    assert str(caught.value).startswith(path + message), str(caught.value)


# dcgm-exporter 4.6.1-4.8.4's chart README, "YAML Exporter Configuration" and the sections after it: each
# example as the README gives it.
README_4_8_4_EXAMPLES = {
    "collections": """version: 2
metrics:
  file: /etc/dcgm-exporter/default-counters.csv
  enableExporterMetrics: false
collections:
  - name: scrape
    every: 30s
    metrics:
      include: ["*"]
""",
    "watch": """version: 2
metrics:
  file: /etc/dcgm-exporter/default-counters.csv
sources:
  dcgm:
    watch:
      maxKeepAge: 10m
      maxKeepSamples: 0
collections:
  - name: scrape
    every: 30s
    metrics:
      include: ["*"]
  - name: fast-thermals
    every: 5s
    sources:
      dcgm:
        watch:
          maxKeepAge: 0s
          maxKeepSamples: 2
    metrics:
      include:
        - DCGM_FI_DEV_GPU_TEMP
        - DCGM_FI_DEV_POWER_USAGE
  - name: slow-nvlink-prm
    every: 5m
    metrics:
      include:
        - DCGM_FI_DEV_NVLINK_PPCNT_*
""",
    "server": "version: 2\nserver:\n  maxConcurrentScrapes: 16\n",
    "bind-unbind": ("version: 2\nsources:\n  dcgm:\n    detectBindUnbind:\n      enabled: true\n"
                    "      pollInterval: 1s\n"),
    "inline": """version: 2
metrics:
  fields:
    - name: DCGM_FI_DEV_GPU_TEMP
      prometheusType: gauge
      help: GPU temperature (in C).
""",
}


@pytest.mark.parametrize("name", sorted(README_4_8_4_EXAMPLES))
def test_every_version_2_example_of_upstreams_chart_readme_loads(tmp_path: Path, name: str) -> None:
    config = load_config(["--config-file", _write(tmp_path, README_4_8_4_EXAMPLES[name])], {})
    assert config.config_file


def test_version_2_maps_onto_the_flags_of_the_same_meaning(tmp_path: Path) -> None:
    path = _write(tmp_path, README_4_8_4_EXAMPLES["watch"])
    config = load_config(["--config-file", path], {})
    assert config.collectors == "/etc/dcgm-exporter/default-counters.csv"
    assert config.collect_interval_ms == 30000  # the all-fields ("*") collection's cadence
    assert (config.watch_max_keep_age, config.watch_max_keep_samples) == ("10m", 0)
    assert config.sources["collect_interval_ms"] == f"{path}:11"
    [note] = config.notes
    assert note == (f"{path}:9: collections fast-thermals, slow-nvlink-prm: per-collection intervals are not used "
                    "here; every field is sampled at the all-fields collection's interval (one NVML cycle for all "
                    "fields)")
    server = load_config(["--config-file", _write(tmp_path, README_4_8_4_EXAMPLES["server"])], {})
    assert server.max_concurrent_scrapes == 16
    assert server.no_effect_warnings() == []  # 16 is upstream's default too: nothing asked, nothing to say
    v1 = load_config(["--config-file", _write(tmp_path, "version: 1\nserver: {maxConcurrentScrapes: 4}\n")], {})
    assert any("--max-concurrent-scrapes" in line for line in v1.no_effect_warnings())
    bind = load_config(["--config-file", _write(tmp_path, README_4_8_4_EXAMPLES["bind-unbind"])], {})
    assert bind.enable_gpu_bind_unbind_watch and bind.gpu_bind_unbind_poll_interval == "1s"
    metrics = load_config(["--config-file", _write(tmp_path, README_4_8_4_EXAMPLES["collections"])], {})
    assert metrics.enable_exporter_metrics is False and metrics.collect_interval_ms == 30000
    inline = load_config(["--config-file", _write(tmp_path, README_4_8_4_EXAMPLES["inline"])], {})
    assert parse_counters(inline.inline_counters, inline.inline_counters_source).has("DCGM_FI_DEV_GPU_TEMP")


def test_version_1_of_4_8_4_takes_its_retention_sources_and_server_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, "version: 1\nmetrics:\n  enableExporterMetrics: true\ncollection:\n  interval: 30s\n"
                            "  retention: {maxAge: 10m, maxSamples: 5}\nserver: {maxConcurrentScrapes: 4}\n")
    config = load_config(["--config-file", path], {})
    assert (config.enable_exporter_metrics, config.watch_max_keep_age, config.watch_max_keep_samples,
            config.max_concurrent_scrapes, config.collect_interval_ms) == (True, "10m", 5, 4, 30000)
