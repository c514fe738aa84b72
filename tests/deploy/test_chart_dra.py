"""kubernetesDRA (dcgm-exporter's value name): the chart turns DRA attribution on and grants exactly
what the ResourceSlice watch needs, only when asked (rendered by Helm's engine)."""

from __future__ import annotations

import pytest

from exporter.config import load_config
from exporter.kube.resourceslices import API_GROUP, RESOURCE, VERSIONS
from simulator.fakeaccess import CHART_GRANTS, DRA_GRANTS, qualified
from tests.deploy.chart_support import Rendered, render


@pytest.fixture(scope="module")
def default() -> Rendered:
    return render()


def _grants(rendered: Rendered) -> dict[str, frozenset[str]]:
    grants: dict[str, frozenset[str]] = {}
    for rule in rendered.one("ClusterRole")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants[qualified(resource, group)] = frozenset(rule["verbs"])
    return grants


def test_default_install_grants_no_resourceslices_and_leaves_dra_off(default: Rendered) -> None:
    assert _grants(default) == dict(CHART_GRANTS)  # the fake API server's identity is the chart's
    assert "KUBERNETES_ENABLE_DRA" not in default.env
    assert not load_config([], {k: str(v) for k, v in default.env.items()}).kubernetes_enable_dra


def test_kubernetes_dra_enabled_grants_get_list_watch_on_resourceslices_and_sets_the_flag() -> None:
    rendered = render({"kubernetesDRA": {"enabled": True, "driverNames": ["gpu.nvidia.com", "gpu.example.com"]}})
    assert _grants(rendered) == {**CHART_GRANTS, **DRA_GRANTS}
    assert {qualified(RESOURCE, API_GROUP): frozenset({"get", "list", "watch"})} == DRA_GRANTS
    config = load_config([], {k: str(v) for k, v in rendered.env.items()})
    assert config.kubernetes_enable_dra
    assert config.kubernetes_dra_driver_names == ("gpu.nvidia.com", "gpu.example.com")
    assert VERSIONS[0] == "v1"  # what the granted group serves first (falls back to v1beta2, v1beta1)


def test_kubernetes_dra_without_kubernetes_mode_grants_nothing() -> None:
    rendered = render({"kubernetes": {"enabled": False}, "kubernetesDRA": {"enabled": True}})
    assert "ClusterRole" not in rendered.kinds()
    assert "KUBERNETES_ENABLE_DRA" not in rendered.env


def test_a_dcgm_exporter_values_file_with_kubernetes_dra_turns_it_on_and_notes_say_so() -> None:
    rendered = render({"kubernetesDRA": {"enabled": True}})
    assert "kubernetesDRA.enabled -> DRA-allocated GPUs carry their pods" in rendered.notes
    assert rendered.env["GPU_POD_EXPORTER_KUBERNETES_DRA_DRIVER_NAMES"] == "gpu.nvidia.com"
