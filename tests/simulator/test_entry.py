"""``simulator.entry``: the one door the product uses, returning what ``exporter.simulation`` describes."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import ConfigError, load_config
from exporter.hub import Hub, SamplerSettings
from exporter.metrics.counters import load_counters
from exporter.metrics.render import RenderOptions
from simulator.entry import PlannedRun, doctor_inspection, plan_run


def test_a_planned_run_points_the_configuration_at_the_simulated_node_and_discards_it() -> None:
    run = plan_run(load_config(["--simulate", "default", "--address", "127.0.0.1:0"], {}))
    assert isinstance(run, PlannedRun) and run.cluster is not None
    workdir = run.cluster.workdir
    assert run.config.kubernetes and run.config.node_name == "hgx-node-01"
    assert run.config.pod_resources_socket == str(workdir / "pod-resources" / "kubelet.sock")
    run.discard()
    assert not workdir.exists()  # never started: planning's directory is gone


def test_a_run_without_a_kubernetes_section_adds_only_the_fake_gpus() -> None:
    run = plan_run(load_config(["--simulate", "gpu-lost", "--address", "127.0.0.1:0"], {}))
    assert isinstance(run, PlannedRun) and run.cluster is None and not run.config.kubernetes
    hub = Hub(load_counters(None), SamplerSettings(1.0, None, 60.0), RenderOptions(hostname="n"))
    run.install(hub)
    assert len(hub.services(before_nvml=True)) == 1 and len(hub.stops()) == 1  # install / uninstall the library
    assert not hub.services(before_nvml=False)  # the library is in place before the sampler's first NVML init
    run.discard()  # nothing to release


def test_a_bad_scenario_is_a_configuration_error_naming_file_and_line(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("gpu_count: 2\ngpu_defaults: {model: no-such-gpu}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{scenario}:2: "):
        plan_run(load_config(["--simulate", str(scenario)], {}))


def test_the_doctor_inspects_the_scenario_just_after_its_last_fault() -> None:
    inspection = doctor_inspection(load_config(["--simulate", "gpu-lost"], {}), None)
    assert inspection.title == "gpu-lost at t=30.5 s"
    with inspection:
        assert inspection.config.simulate == "gpu-lost"
