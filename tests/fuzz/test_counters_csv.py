"""The counters CSV: any text yields a CounterSet or one CounterFileError line naming file and line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.metrics.catalog import CATALOG
from exporter.metrics.counters import PROMETHEUS_TYPES, CounterFileError, CounterSet, parse_counters
from tests.fuzz.inputs import assert_user_error, within

NAMES = sorted(CATALOG.all_names())[:200]

row = st.tuples(st.one_of(st.sampled_from(NAMES), st.text(max_size=30)),
                st.one_of(st.sampled_from(PROMETHEUS_TYPES), st.text(max_size=10)),
                st.text(max_size=40)).map(", ".join)
line = st.one_of(row, st.text(max_size=80), st.just("# comment,,"), st.just(""),
                 st.sampled_from(['DCGM_FI_DEV_GPU_TEMP, gauge, "help, with comma"', 'x, "unterminated',
                                  "DCGM_FI_DEV_GPU_TEMP,gauge,a\u2028b", "\ufeffDCGM_FI_DEV_GPU_TEMP, gauge, t"]))
documents = st.tuples(st.lists(line, max_size=20), st.sampled_from(["\n", "\r\n"])).map(
    lambda parts: parts[1].join(parts[0]))


def parse(text: str) -> CounterSet | CounterFileError:
    try:
        return within(10, lambda: parse_counters(text, "c.csv"))
    except CounterFileError as exc:
        return exc


@given(documents)
def test_any_counters_file_gives_counters_or_one_line(text: str) -> None:
    result = parse(text)
    if isinstance(result, CounterFileError):
        assert_user_error(str(result), secrets=())
        assert str(result).startswith("c.csv")
    else:
        for warning in result.warnings:
            assert_user_error(warning, secrets=())


def test_a_byte_order_mark_is_dropped_and_unicode_line_separators_do_not_split_rows() -> None:
    counters = parse("\ufeffDCGM_FI_DEV_GPU_TEMP, gauge, temp\u2028still the help\u0085text\n")
    assert isinstance(counters, CounterSet) and [row.name for row in counters.metrics] == ["DCGM_FI_DEV_GPU_TEMP"]


def test_no_field_selected_warns_and_duplicates_warn_once_per_group() -> None:
    for text in ("", "# only comments,,\n\n"):
        counters = parse(text)
        assert isinstance(counters, CounterSet)
        assert any("selects no DCGM field" in warning for warning in counters.warnings)
    counters = parse("DCGM_FI_DEV_GPU_TEMP, gauge, t\n" * 100_000)
    assert isinstance(counters, CounterSet)
    assert len(counters.warnings) == 1 and "and 99993 more" in counters.warnings[0]
