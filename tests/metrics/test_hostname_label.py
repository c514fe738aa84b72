"""Readers of series and alerts find the node under either dcgm-exporter spelling."""

from __future__ import annotations

from exporter.metrics.hostname_label import node_name


def test_either_spelling_names_the_node() -> None:
    assert node_name({"Hostname": "n1"}) == "n1"
    assert node_name({"hostname": "n2"}) == "n2"
    assert node_name({"hostname": "n2"}, "hostname") == "n2"
    assert node_name({"Hostname": "n1"}, "hostname") == "n1"


def test_the_configured_label_wins_and_other_labels_do_not_fall_back() -> None:
    assert node_name({"Hostname": "n1", "hostname": "slurm-n1"}) == "n1"
    assert node_name({"Hostname": "n1", "hostname": "slurm-n1"}, "hostname") == "slurm-n1"
    assert node_name({"hostname": "n2"}, "node") == ""
    assert node_name({}) == ""
