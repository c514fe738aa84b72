"""The PromQL name extractor: it must see every metric and label, and reject what it cannot check."""

import pytest

from tests.dashboards.promql_names import (
    PromQLSyntaxError,
    UnverifiableSelectorError,
    counters_read_as_values,
    names_in,
    or_branches,
    unknown_names,
)


def test_metrics_and_labels_are_found_in_every_position() -> None:
    names = names_in(
        'sum by (namespace) (rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{Hostname="n"}[5m]))'
        " / on (UUID) group_left (modelName) max without (pod) (DCGM_FI_DEV_GPU_UTIL offset 5m)"
        ' or label_replace(kube_node_labels, "Hostname", "$1", "node", "(.+)")'
        " unless sum_over_time(team:gpu_allocated:sum[30d:5m]) > bool 3"
    )
    assert names.metrics == {
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_GPU_UTIL",
        "kube_node_labels",
        "team:gpu_allocated:sum",
    }
    assert names.labels == {"namespace", "Hostname", "UUID", "modelName", "pod", "node"}


def test_a_name_given_as_a_name_matcher_counts_as_the_metric() -> None:
    assert names_in('{__name__="DCGM_FI_DEV_GPU_TEMP", gpu="0"}').metrics == {"DCGM_FI_DEV_GPU_TEMP"}


def test_a_regex_on_the_metric_name_cannot_be_verified() -> None:
    with pytest.raises(UnverifiableSelectorError):
        names_in('{__name__=~"DCGM_FI_DEV_.*"}')


def test_broken_promql_is_reported_with_the_expression() -> None:
    with pytest.raises(PromQLSyntaxError, match="DCGM_FI_DEV_GPU_UTIL"):
        names_in("sum(rate(DCGM_FI_DEV_GPU_UTIL[5m])")


def test_a_typo_in_a_metric_name_is_reported() -> None:
    problems = unknown_names([("panel X", 'avg(DCGM_FI_DEV_GPU_UTILL{Hostname="a"})')],
                             {"DCGM_FI_DEV_GPU_UTIL"}, {"Hostname"})
    assert problems == ["panel X: unknown metric DCGM_FI_DEV_GPU_UTILL"]


def test_a_label_in_the_wrong_case_is_reported() -> None:
    exprs = [("rule Y", 'DCGM_FI_DEV_GPU_UTIL{hostname="a"}')]
    problems = unknown_names(exprs, {"DCGM_FI_DEV_GPU_UTIL"}, {"Hostname"})
    assert problems == ["rule Y: unknown label hostname"]


@pytest.mark.parametrize(
    ("expr", "flagged"),
    [
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0", ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]),
        ("increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0", []),
        ("rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m]) / 1e9 > 0.5", []),
        # first seen: the series did not exist one window ago
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 unless on (UUID) DCGM_FI_DEV_ECC_DBE_VOL_TOTAL offset 10m", []),
        # an `unless` without an offset is not the first-seen pattern
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 unless on (UUID) DCGM_FI_DEV_GPU_TEMP",
         ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]),
        # a plain comparison elsewhere in the expression is still caught
        ("DCGM_EXP_XID_ERRORS_TOTAL > 3"
         " or (DCGM_EXP_XID_ERRORS_TOTAL unless DCGM_EXP_XID_ERRORS_TOTAL offset 5m)",
         ["DCGM_EXP_XID_ERRORS_TOTAL"]),
        ("DCGM_FI_DEV_GPU_TEMP > 85", []),
    ],
)
def test_counters_are_only_read_as_deltas(expr: str, flagged: list[str]) -> None:
    counters = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_EXP_XID_ERRORS_TOTAL"}
    assert counters_read_as_values(expr, counters) == flagged


def test_or_alternatives_are_split_at_the_top_level_only() -> None:
    assert or_branches("(increase(a[10m]) > 0) or (a > 0 unless on (H) a offset 10m) or b == 1") == [
        "increase(a{}[10m]) > 0", "a{} > 0 unless on (H) a{} offset 10m", "b{} == 1"]
    assert len(or_branches("(x or y) unless z")) == 1  # an `or` inside another operator is no alternative
    assert or_branches("DCGM_FI_DEV_GPU_TEMP > 85") == ["DCGM_FI_DEV_GPU_TEMP{} > 85"]
