"""The byte encoding: dcgm-exporter's names and label order, correct escaping, parseable by Prometheus."""

from __future__ import annotations

import gzip

import pytest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.metrics.exposition import (
    counters_need_text,
    encode_openmetrics,
    encode_text,
    gzip_bytes,
    wants_openmetrics,
)

NASTY = 'quote " backslash \\ newline \n unicode ☃ ' + "x" * 10_000


def families() -> list[Metric]:
    energy = Metric("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", "counter")
    energy.add_sample("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                      {"gpu": "0", "UUID": "GPU-1", "pci_bus_id": "00000000:8D:00.0", "device": "nvidia0",
                       "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-1"}, 123456789)
    power = Metric("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).\nsecond line \\ backslash", "gauge")
    power.add_sample("DCGM_FI_DEV_POWER_USAGE", {"gpu": "0", "pod": NASTY}, 301.25)
    calls = Metric("gpu_pod_exporter_nvml_calls", "NVML calls.", "counter")
    calls.add_sample("gpu_pod_exporter_nvml_calls_total", {}, 42)
    empty = Metric("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in %).", "gauge")
    return [energy, power, calls, empty]


def test_text_keeps_dcgm_names_types_and_label_order() -> None:
    text = encode_text(families()).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert ('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-1",pci_bus_id="00000000:8D:00.0",'
            'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 123456789\n') in text
    assert "DCGM_FI_DEV_POWER_USAGE{" in text and "} 301.25\n" in text
    assert "# TYPE gpu_pod_exporter_nvml_calls_total counter\ngpu_pod_exporter_nvml_calls_total 42\n" in text
    assert "FAN_SPEED" not in text  # a family without samples is not written at all


def test_text_round_trips_through_prometheus_clients_parser() -> None:
    parsed = {family.name: family for family in parse_text(encode_text(families()).decode())}
    power = parsed["DCGM_FI_DEV_POWER_USAGE"]
    assert power.documentation == "Power draw (in W).\nsecond line \\ backslash"
    assert power.samples[0].labels["pod"] == NASTY
    assert power.samples[0].value == 301.25


def test_openmetrics_is_valid_and_keeps_the_series_names() -> None:
    text = encode_openmetrics(families()).decode()
    assert text.endswith("# EOF\n")
    parsed = {family.name: family for family in parse_openmetrics(text)}
    energy = parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.type == "unknown"  # a counter without _total cannot be an OpenMetrics counter
    assert energy.samples[0].name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert parsed["gpu_pod_exporter_nvml_calls"].type == "counter"
    assert parsed["gpu_pod_exporter_nvml_calls"].samples[0].name == "gpu_pod_exporter_nvml_calls_total"
    assert parsed["DCGM_FI_DEV_POWER_USAGE"].samples[0].labels["pod"] == NASTY


def test_gzip_is_deterministic_and_decompresses_to_the_same_bytes() -> None:
    body = encode_text(families())
    assert gzip.decompress(gzip_bytes(body)) == body
    assert gzip_bytes(body) == gzip_bytes(body)


def test_a_lone_surrogate_becomes_the_replacement_character_in_both_formats() -> None:
    """JSON can carry "\\ud800" (no UTF-8 form); one such label value must not break the exposition."""
    team = Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge")
    team.add_sample("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "team": "bad\ud800team"}, 40)
    for encode, parse in ((encode_text, parse_text), (encode_openmetrics, parse_openmetrics)):
        [family] = [family for family in parse(encode([team]).decode("utf-8")) if family.samples]
        assert family.samples[0].labels["team"] == "bad\ufffdteam"


PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def test_dcgm_counters_make_negotiation_answer_in_text_where_they_stay_counters() -> None:
    """Prometheus asks for OpenMetrics first; OpenMetrics would type DCGM's counters "unknown"."""
    assert counters_need_text(families())
    assert not wants_openmetrics(PROMETHEUS_ACCEPT, counters_need_text=True)
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in encode_text(families()).decode()


def test_openmetrics_when_it_loses_nothing_or_is_all_the_client_takes() -> None:
    conforming = [family for family in families() if family.name != "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert not counters_need_text(conforming)
    assert wants_openmetrics(PROMETHEUS_ACCEPT, counters_need_text=False)
    assert wants_openmetrics("application/openmetrics-text; version=1.0.0", counters_need_text=True)
    assert not wants_openmetrics("text/plain", counters_need_text=False)
    assert not wants_openmetrics("application/openmetrics-text;q=0", counters_need_text=False)


def _gauge(name: str, value: float, kind: str = "gauge") -> Metric:
    family = Metric(name, f"{name} help.", kind)
    family.add_sample(name, {"gpu": "0"}, value)
    return family


def test_a_family_without_samples_between_others_hides_only_itself() -> None:
    empty = Metric("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in %).", "gauge")
    exposed = [_gauge("DCGM_FI_DEV_GPU_TEMP", 40), empty, _gauge("DCGM_FI_DEV_POWER_USAGE", 300)]
    for encode in (encode_text, encode_openmetrics):
        text = encode(exposed).decode()
        assert "FAN_SPEED" not in text
        assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0"} 300\n' in text


def test_an_untyped_family_is_untyped_in_text_and_unknown_in_openmetrics() -> None:
    family = _gauge("DCGM_FI_DEV_VBIOS_VERSION", 1, "untyped")
    assert "# TYPE DCGM_FI_DEV_VBIOS_VERSION untyped\n" in encode_text([family]).decode()
    [parsed] = parse_text(encode_text([family]).decode())
    assert parsed.type == "unknown" and parsed.samples[0].value == 1
    assert "# TYPE DCGM_FI_DEV_VBIOS_VERSION unknown\n" in encode_openmetrics([family]).decode()


def test_a_counter_family_named_with_total_is_a_counter_in_both_formats() -> None:
    """Our own counters are named like their samples (``..._total``); OpenMetrics names the family without it."""
    calls = _gauge("gpu_pod_exporter_nvml_calls_total", 7, "counter")
    text = encode_text([calls]).decode()
    assert "# TYPE gpu_pod_exporter_nvml_calls_total counter\n" in text
    openmetrics = encode_openmetrics([calls]).decode()
    assert "# TYPE gpu_pod_exporter_nvml_calls counter\n" in openmetrics
    [parsed] = parse_openmetrics(openmetrics)
    assert parsed.type == "counter" and parsed.samples[0].name == "gpu_pod_exporter_nvml_calls_total"


def test_backslashes_survive_exactly_in_label_values_and_help() -> None:
    r"""A backslash before ``n`` must come back as a backslash and an ``n``, not as a newline."""
    family = Metric("DCGM_FI_DEV_GPU_TEMP", r"C:\new\ help \ end", "gauge")
    family.add_sample("DCGM_FI_DEV_GPU_TEMP", {"pod": "C:\\new\\", "team": 'a\\"b'}, 40)
    text = encode_text([family]).decode()
    assert r'{pod="C:\\new\\",team="a\\\"b"}' in text
    assert r"# HELP DCGM_FI_DEV_GPU_TEMP C:\\new\\ help \\ end" + "\n" in text
    for parse, encode in ((parse_text, encode_text), (parse_openmetrics, encode_openmetrics)):
        [parsed] = parse(encode([family]).decode())
        assert parsed.samples[0].labels == {"pod": "C:\\new\\", "team": 'a\\"b'}
        assert parsed.documentation == r"C:\new\ help \ end"


def test_boolean_readings_print_as_one_and_zero() -> None:
    text = encode_text([_gauge("up_true", True), _gauge("up_false", False)]).decode()
    assert 'up_true{gpu="0"} 1\n' in text and 'up_false{gpu="0"} 0\n' in text


def test_gzip_carries_no_timestamp_so_a_body_compresses_to_the_same_bytes_at_any_time() -> None:
    compressed = gzip_bytes(encode_text(families()))
    assert compressed[4:8] == b"\0\0\0\0"  # RFC 1952 MTIME: zero means "no time stamp"


@pytest.mark.parametrize(("accept", "counters_need_text_", "openmetrics"), [
    # equal weights: OpenMetrics, whether the weight is written or implied
    ("application/openmetrics-text, text/plain", False, True),
    ("application/openmetrics-text;q=1.0, text/plain", False, True),
    ("text/plain;q=0.5, application/openmetrics-text;q=0.5", False, True),
    # text weighed higher, under each name a client may use for it
    ("application/openmetrics-text;q=0.5, text/plain", False, False),
    ("application/openmetrics-text;q=0.5, */*", False, False),
    ("application/openmetrics-text;q=0.5, text/*", False, False),
    ("application/openmetrics-text;q=0.5, TEXT/PLAIN;Q=0.9", False, False),
    # a client that accepts text in any of its names gets DCGM's counters as counters
    ("application/openmetrics-text, */*;q=0.1", True, False),
    ("application/openmetrics-text, text/*;q=0.1", True, False),
    # a client that refuses text (q=0) gets OpenMetrics even for DCGM's counters
    ("application/openmetrics-text, text/plain;q=0", True, True),
    # a weight that is not a number means "not acceptable", never "fully acceptable"
    ("application/openmetrics-text;q=high, text/plain;q=0.1", False, False),
    ("application/openmetrics-text;q=0=1, text/plain;q=0.1", False, False),
])
def test_content_negotiation_follows_the_clients_weights(accept: str, counters_need_text_: bool,
                                                         openmetrics: bool) -> None:
    assert wants_openmetrics(accept, counters_need_text=counters_need_text_) is openmetrics


def test_a_label_set_repeated_across_families_is_written_the_same_each_time_in_its_own_order() -> None:
    """The encoders write each distinct label set once and reuse it (bench: half the encoding CPU at 64
    GPUs); a set with the same pairs in another order is another set and keeps its order."""
    labels = {"gpu": "0", "UUID": "GPU-1", "pod": 'a"b\\c\nd'}
    reordered = {"pod": 'a"b\\c\nd', "gpu": "0", "UUID": "GPU-1"}
    metrics = [_gauge(name, 1) for name in ("first", "second")]
    for metric in metrics:
        metric.samples.clear()
        metric.add_sample(metric.name, dict(labels), 1)
        metric.add_sample(metric.name, dict(reordered), 2)
    for encode in (encode_text, encode_openmetrics):
        lines = [line for line in encode(metrics).decode().splitlines() if not line.startswith("#")]
        assert lines == [f'{name}{{gpu="0",UUID="GPU-1",pod="a\\"b\\\\c\\nd"}} 1' if value == "1" else
                         f'{name}{{pod="a\\"b\\\\c\\nd",gpu="0",UUID="GPU-1"}} 2'
                         for name in ("first", "second") for value in ("1", "2")]
