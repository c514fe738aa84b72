"""-m/--configmap-data: the counters CSV from a ConfigMap, read at start and refreshed in the background."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.app import App
from exporter.cli import build_app
from exporter.config import load_config
from exporter.kube.configmap import ConfigMapCounters, ConfigMapUnavailableError
from exporter.metrics.counters import CounterFileError, CounterSet
from exporter.options import ConfigMapRef
from tests.nvml.fake_sampling import captured_logs
from tests.support.configmap_api import NAME, NAMESPACE, ConfigMapApi

TEMP_ONLY = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
POWER_ONLY = "# a comment\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"


def _source(server: ConfigMapApi, tmp_path: Path) -> ConfigMapCounters:
    return ConfigMapCounters(ConfigMapRef(NAMESPACE, NAME), str(server.write_kubeconfig(tmp_path / "kubeconfig")), 60.0)


def test_reads_key_metrics_as_dcgm_exporter_does(tmp_path: Path) -> None:
    with ConfigMapApi(TEMP_ONLY) as server:
        counters = _source(server, tmp_path).read()
    assert [row.name for row in counters.metrics] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert counters.source == f"configmap {NAMESPACE}/{NAME} (key metrics)"


@pytest.mark.parametrize(("metrics", "status", "message"), [
    (TEMP_ONLY, 404, "ConfigMap not found"),
    (TEMP_ONLY, 403, f"needs 'get' on configmaps/{NAME} in namespace {NAMESPACE}"),
    (None, 200, "has no key 'metrics'"),
])
def test_why_a_configmap_cannot_be_used(tmp_path: Path, metrics: str | None, status: int, message: str) -> None:
    with ConfigMapApi(metrics) as server:
        server.status = status
        with pytest.raises(ConfigMapUnavailableError, match=message):
            _source(server, tmp_path).read()


def test_an_unreachable_api_server_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    with ConfigMapApi(TEMP_ONLY) as server:
        source = _source(server, tmp_path)
    with pytest.raises(ConfigMapUnavailableError, match="cannot reach the API server"):
        source.read()


def test_a_csv_mistake_names_the_configmap_and_line(tmp_path: Path) -> None:
    with ConfigMapApi("DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV GPU_TEMP, gauge, typo\n") as server, \
            pytest.raises(CounterFileError) as caught:
        _source(server, tmp_path).read()
    assert str(caught.value).startswith(f"configmap {NAMESPACE}/{NAME} (key metrics):2: DCGM_FI_DEV GPU_TEMP:")


def test_the_skipped_rows_metric_follows_a_reload(tmp_path: Path) -> None:
    """gpu_pod_exporter_counters_skipped_rows describes the counters in use: after the ConfigMap changes, the
    next /metrics says what the new CSV skipped (here a newer DCGM's field), and the warning names its line."""
    loaded = load_config(["--address", "127.0.0.1:0"], {})
    with ConfigMapApi(TEMP_ONLY) as server, captured_logs() as logs:
        source = _source(server, tmp_path)
        app = build_app(loaded, source.read())
        try:
            source.on_change = app.hub.set_counters
            assert 'gpu_pod_exporter_counters_skipped_rows{reason="unknown_field"} 0' in _metrics(app)
            server.metrics = TEMP_ONLY + "DCGM_FI_DEV_FABRIC_FUTURE_THING, gauge, newer\n" \
                + "DCGM_FI_DEV_GPU_TEMP, gauge, again\n"
            assert source.refresh()
            text = _metrics(app)
            assert 'gpu_pod_exporter_counters_skipped_rows{reason="unknown_field"} 1' in text
            assert 'gpu_pod_exporter_counters_skipped_rows{reason="duplicate"} 1' in text
            assert 'gpu_pod_exporter_counters_skipped_rows{reason="not_readable_through_nvml"} 0' in text
        finally:
            app.stop()
    assert any(message.startswith(f"configmap {NAMESPACE}/{NAME} (key metrics):2: DCGM_FI_DEV_FABRIC_FUTURE_THING: "
                                  "not a field of any DCGM release") for message in logs.messages())


def _metrics(app: App) -> str:
    return app.cache.refresh().body(openmetrics=False, compressed=False).decode()


def test_refresh_applies_a_change_once_and_keeps_the_counters_on_a_broken_one(
        tmp_path: Path) -> None:
    applied: list[CounterSet] = []
    with ConfigMapApi(TEMP_ONLY) as server, captured_logs() as logs:
        source = _source(server, tmp_path)
        source.on_change = applied.append
        source.read()
        assert source.refresh() and applied == []  # unchanged: nothing to apply
        server.metrics = POWER_ONLY
        assert source.refresh() and source.refresh()
        assert [[row.name for row in counters.metrics] for counters in applied] == [["DCGM_FI_DEV_POWER_USAGE"]]
        server.metrics = "not,a,valid,row\n"
        source.refresh()
        source.refresh()
        assert len(applied) == 1  # the broken CSV is not applied, and reported once
        server.status = 503
        assert not source.refresh() and not source.refresh()
        server.status = 200
        server.metrics = TEMP_ONLY
        assert source.refresh()
    assert [[row.name for row in counters.metrics] for counters in applied][-1] == ["DCGM_FI_DEV_GPU_TEMP"]
    messages = logs.messages()
    assert sum("has a mistake" in message for message in messages) == 1
    assert sum("answered 503" in message for message in messages) == 1
    assert any("readable again" in message for message in messages)


def test_failures_back_off_exponentially_with_jitter(tmp_path: Path) -> None:
    waits: list[float] = []
    with ConfigMapApi(TEMP_ONLY) as server:
        source = ConfigMapCounters(ConfigMapRef(NAMESPACE, NAME), str(server.write_kubeconfig(tmp_path / "k")), 30.0,
                                   jitter=lambda: 0.5, clock=lambda: sum(waits))
        server.status = 500
        for _ in range(8):
            waits.append(source.next_delay())
        server.status = 200
        waits.append(source.next_delay())
    # The shared backoff's windows (5 s doubling to 300 s, back to back: [0, 5), [5, 15), [15, 35), ...), one
    # attempt in the middle of each (jitter 0.5); after a success, the interval again.
    assert waits == [2.5, 7.5, 15.0, 30.0, 60.0, 120.0, 230.0, 300.0, 30.0]
