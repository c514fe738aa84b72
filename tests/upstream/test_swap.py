"""Each dcgm-exporter release's whole command line, every flag at once in Go's syntax, and then every
environment variable at once, starts this exporter (on simulated GPUs, the one change) and it serves;
each flag it accepts without acting on it is named once in a start-up line saying why.

--web-systemd-socket is the one flag left out of the combined start: it serves on a socket systemd passes
(LISTEN_FDS), and without one the start is refused with that reason (tests/web/test_socket_activation.py
starts it with one)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.config import OPTIONS
from exporter.metrics.catalog import CATALOG
from tests.support.exporter_process import ExporterProcess, parse_samples
from tests.support.polling import wait_for
from tests.support.ports import free_port
from upstream.matrix import example_value, releases

pytestmark = pytest.mark.e2e

OPTION_BY_FLAG = {flag: option for option in OPTIONS for flag in option.flags}
LEFT_OUT = {"web-systemd-socket"}
# Values other than dcgm-exporter's default for the flags accepted without effect: the start-up line is
# printed only when such a flag asks for something (its default asks for nothing, and upstream's own
# manifests pass some defaults explicitly).
NOT_DEFAULT = {"cpu-devices": "g", "switch-devices": "g", "dcgm-log-level": "ERROR", "dump-directory": "/var/tmp/dumps",
               "dump-retention": "48", "dump-compression": "false", "gpu-bind-unbind-poll-interval": "5s",
               "remote-hostengine-info": "localhost:5556", "watch-max-keep-age": "10m", "watch-max-keep-samples": "2",
               "max-concurrent-scrapes": "8", "container-runtime-socket": "/run/docker.sock"}


def _values(tmp_path: Path, port: int) -> dict[str, str]:
    """Values that must name something real on this machine (files, a directory, a free port)."""
    web_config = tmp_path / "web-config.yaml"
    web_config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n", encoding="utf-8")
    jobs = tmp_path / "hpc-jobs"
    jobs.mkdir(exist_ok=True)
    config = tmp_path / "config.yaml"
    config.write_text("version: 1\ncollection:\n  interval: 30s\n", encoding="utf-8")
    return {**NOT_DEFAULT, "address": f"127.0.0.1:{port}", "web-config-file": str(web_config),
            "hpc-job-mapping-dir": str(jobs), "config-file": str(config), "collect-interval": "1000"}


def _flags(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [flag for flag in record["flags"] if flag["name"] not in LEFT_OUT]


def _accepted_flags(record: dict[str, Any]) -> list[str]:
    return [f"--{flag['name']}" for flag in _flags(record)
            if (option := OPTION_BY_FLAG.get(f"--{flag['name']}")) is not None and option.no_effect]


@pytest.fixture(params=releases(), ids=lambda r: r["release"])
def record(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(request.param)


def _started(args: list[str], env: dict[str, str], port: int) -> Iterator[ExporterProcess]:
    exporter = ExporterProcess([*args, "--simulate"], env, port=port)
    try:
        exporter.wait_healthy(deadline_s=60)
        yield exporter
    finally:
        exporter.stop()


def _assert_serves_and_names_what_it_ignores(exporter: ExporterProcess, accepted: list[str], how: str) -> None:
    samples = exporter.metrics()
    assert "DCGM_FI_DEV_GPU_TEMP{" in samples or "dcgm_gpu_temp{" in samples
    log = exporter.log()
    for flag in accepted:
        lines = [line for line in log.splitlines() if ("accepted for compatibility" in line and f"({flag})" in line)
                 or f"{how} {flag} is accepted" in line]
        assert len(lines) == 1, f"{flag}: expected one start-up line saying what differs, got {lines}"


def test_every_flag_at_once_in_go_syntax(record: dict[str, Any], tmp_path: Path) -> None:
    port = free_port()
    given = _values(tmp_path, port)
    argv: list[str] = []
    for flag in _flags(record):
        value = given.get(flag["name"], example_value(flag))
        if value == "false":  # a switch turned off: Go's -name=false
            argv.append(f"-{flag['name']}=false")
        else:
            argv += [f"-{flag['name']}"] if value is None else [f"-{flag['name']}", value]
    for exporter in _started(argv, {}, port):
        _assert_serves_and_names_what_it_ignores(exporter, _accepted_flags(record), "flag")


def test_every_environment_variable_at_once(record: dict[str, Any], tmp_path: Path) -> None:
    port = free_port()
    given = _values(tmp_path, port)
    env: dict[str, str] = {}
    for flag in _flags(record):
        value = given.get(flag["name"], example_value(flag))
        for name in flag["env"]:
            env[name] = "true" if value is None else value
    env.pop("DCGM_EXPORTER_LISTEN", None)  # the harness listens on its free port (--address)
    for exporter in _started([], env, port):
        _assert_serves_and_names_what_it_ignores(exporter, _accepted_flags(record), "environment variable")


@pytest.mark.parametrize("release", [r["release"] for r in releases()])
def test_the_releases_example_daemonset_runs_unchanged_with_that_releases_node_label(release: str) -> None:
    """dcgm-exporter's own example DaemonSet of the release, its args and environment as the kubelet gives them
    (NODE_NAME from the downward API). 4.8.3 and later: unchanged, hostname. 4.8.2 and earlier: what the migration
    guide says to add besides the image, GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT, and Hostname."""
    record = next(r for r in releases() if r["release"] == release)
    [daemonset] = record["example_daemonsets"].values()
    env = {item["name"]: str(item["value"]) for item in daemonset["env"] if "value" in item}
    env |= {item["name"]: "hgx-node-01" for item in daemonset["env"]
            if item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName"}
    port = free_port()
    env["DCGM_EXPORTER_LISTEN"] = f"127.0.0.1:{port}"  # the spec's :9400, on a free port of this shared machine
    old = record["exporter_version"] < "4.8.3"
    if old:
        env["GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT"] = record["exporter_version"]
    spelling, other = ("Hostname", "hostname") if old else ("hostname", "Hostname")
    for exporter in _started(list(daemonset["args"]), env, port):
        # DCGM_EXPORTER_KUBERNETES=true: the pods arrive with the kubelet's first List, after /health is up.
        def attributed(started: ExporterProcess = exporter) -> list[tuple[dict[str, str], float]] | None:
            found = started.samples("DCGM_FI_DEV_GPU_TEMP")
            return found if any(labels.get("pod") for labels, _ in found) else None

        temps = wait_for(attributed, 60, "pods on the GPU series")
        assert len(temps) == 8
        assert all(labels[spelling] == "hgx-node-01" and other not in labels for labels, _ in temps)


CSVS = ("etc/default-counters.csv", "etc/dcp-metrics-included.csv", "etc/1.x-compatibility-metrics.csv")
# Counters with a label per event kind (xid="79"): their series start with the first event of that kind,
# and the default scenario raises none.
PER_EVENT = {"DCGM_EXP_XID_ERRORS_TOTAL"}


def _csv_text(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


@pytest.mark.parametrize(("release", "path"), [(r["release"], p) for r in releases() for p in CSVS if p in r["csv"]],
                         ids=[f"{r['release']}:{p.rsplit('/', 1)[-1]}" for r in releases() for p in CSVS
                              if p in r["csv"]])
def test_the_releases_counters_csv_serves_with_every_row_accounted_for(release: str, path: str,
                                                                      tmp_path: Path) -> None:
    """The release's counters list with its commented-out rows uncommented too (users uncomment them: 4.8.3's
    DCGM_FI_PROF_*_TOTAL, 4.8.4's fabric health): the exporter starts with it, and every row is served as a
    series (a label row as a label), or named as not supported by the GPU, or named in one start-up line."""
    record = next(r for r in releases() if r["release"] == release)
    rows = [*record["csv"][path]["rows"], *record["csv"][path]["commented_rows"]]
    counters = tmp_path / path.rsplit("/", 1)[-1]
    counters.write_text(_csv_text(rows), encoding="utf-8")
    port = free_port()
    for exporter in _started(["-f", str(counters)], {}, port):
        def unaccounted(started: ExporterProcess = exporter) -> list[str]:
            samples = parse_samples(started.metrics())
            served = {name for name, _labels, _value in samples}
            label_names = {label for _name, labels, _value in samples for label in labels}
            unsupported = {labels.get("field") for name, labels, _value in samples
                           if name == "gpu_pod_exporter_field_unsupported"}
            log = started.log()
            missing = []
            for name, prom_type, _help in rows:
                if prom_type.lower() == "label":
                    accounted = name in label_names or f": {name}:" in log
                elif name in PER_EVENT:
                    accounted = True  # one series per event kind, from the first event (tests/health covers them)
                else:
                    spec = CATALOG.lookup(name)  # a 1.x name is reported unsupported under its DCGM name
                    accounted = (name in served or f"{name}_total" in served or name in unsupported
                                 or (spec is not None and spec.name in unsupported) or f": {name}:" in log)
                if not accounted:
                    missing.append(name)
            return missing

        # Rates (profiling, NVLink bandwidth) need a second sample: poll until every row is accounted for.
        try:
            wait_for(lambda: not unaccounted(), 30, "every row served, reported unsupported or named")
        except AssertionError:
            pytest.fail(f"rows neither served, reported unsupported nor named at start: {unaccounted()}")
        served = {name for name, _labels, _value in parse_samples(exporter.metrics())}
        assert len(served & {name for name, _t, _h in rows}) >= 10  # the list really serves
