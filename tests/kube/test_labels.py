"""Pod-label copying (allowlist, sanitising, collisions, bounds) and the team label."""

from __future__ import annotations

import pytest

from exporter.kube.labels import (
    MAX_POD_LABEL_VALUE_LENGTH,
    MAX_POD_LABELS,
    RESERVED_LABELS,
    PodLabelPolicy,
    TeamResolver,
    sanitize_label_name,
)
from exporter.options import parse_team_sources


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("app", "app"),
        ("app.kubernetes.io/name", "app_kubernetes_io_name"),
        ("example.com/cost-center", "example_com_cost_center"),
        ("9lives", "_9lives"),
        ("__meta", "_meta"),
        ("-x", "_x"),
        ("ünïcode", "_n_code"),
        ("", "_"),
    ],
)
def test_sanitize(key: str, name: str) -> None:
    assert sanitize_label_name(key) == name


def test_disabled_copies_nothing() -> None:
    assert PodLabelPolicy(False).select({"app": "x"}) == ()


def test_empty_allowlist_copies_everything_sorted() -> None:
    policy = PodLabelPolicy(True)
    assert policy.select({"tier": "web", "app.kubernetes.io/name": "shop"}) == (
        ("app_kubernetes_io_name", "shop"),
        ("tier", "web"),
    )


def test_allowlist_is_an_unanchored_search_on_the_original_key() -> None:
    policy = PodLabelPolicy(True, ["^app$", "kubernetes.io/"])
    labels = {"app": "a", "application": "b", "app.kubernetes.io/version": "1.2", "tier": "web"}
    assert policy.select(labels) == (("app", "a"), ("app_kubernetes_io_version", "1.2"))


def test_builtin_labels_are_never_overridden() -> None:
    policy = PodLabelPolicy(True)
    labels = {
        name: "evil"
        for name in (
            "gpu",
            "UUID",
            "pod",
            "namespace",
            "container",
            "team",
            "vgpu",
            "pid",
            "Hostname",
            "modelName",
            "job",
            "instance",
        )
    }
    labels["p.o.d"] = "fine"
    assert policy.select(labels) == (("p_o_d", "fine"),)
    assert {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "container",
        "namespace",
        "pod",
        "pod_uid",
        "team",
        "vgpu",
        "err_code",
        "err_msg",
        "xid",
        "pid",
    } <= RESERVED_LABELS


def test_keys_that_sanitise_alike_keep_the_first_in_sorted_order() -> None:
    policy = PodLabelPolicy(True)
    assert policy.select({"a.b": "dot", "a-b": "dash", "a_b": "underscore"}) == (("a_b", "dash"),)


def test_count_and_value_length_are_bounded() -> None:
    policy = PodLabelPolicy(True)
    labels = {f"k{index:02d}": "v" for index in range(MAX_POD_LABELS + 5)}
    selected = policy.select(labels)
    assert len(selected) == MAX_POD_LABELS
    assert selected[0] == ("k00", "v")
    long_value = "x" * (MAX_POD_LABEL_VALUE_LENGTH + 1)
    assert policy.select({"big": long_value, "ok": "x" * MAX_POD_LABEL_VALUE_LENGTH}) == (
        ("ok", "x" * MAX_POD_LABEL_VALUE_LENGTH),
    )
    assert policy.select({"empty": ""}) == ()


def test_values_pass_through_unmodified() -> None:
    value = 'a "quoted" \\ back\nslash ünïcødé 🚀'
    assert PodLabelPolicy(True).select({"note": value}) == (("note", value),)


def test_team_first_configured_source_wins() -> None:
    resolver = TeamResolver(parse_team_sources("pod:team,namespace:team"))
    assert resolver.team({"team": "vision"}, {"team": "research"}) == "vision"
    assert resolver.team({}, {"team": "research"}) == "research"
    assert resolver.team({"team": ""}, {"team": "research"}) == "research"
    assert resolver.team({}, None) is None
    custom = TeamResolver(parse_team_sources(["namespace:owner", "pod:squad"]))
    assert custom.team({"squad": "s"}, {"owner": "o"}) == "o"
    assert custom.team({"squad": "s"}, {}) == "s"
    with pytest.raises(ValueError, match="pod:<label-key> or namespace:<label-key>"):
        parse_team_sources("node:team")  # refused where the setting is read, so the resolver never sees it
