"""Loading dcgm-exporter's counters CSV: which DCGM fields to export, with which type and help text.

The format is dcgm-exporter's, so a platform team's existing file keeps working: lines starting
with ``#`` are comments (dcgm-exporter's own file writes them as ``# Clocks,,``), blank lines are
ignored, and every other record has exactly three columns ``DCGM field, Prometheus type, help``
with surrounding spaces trimmed (quoted help text may contain commas). Type ``label`` turns the
field's string value into a label on every GPU series instead of a metric.

Rows that cannot be exported are skipped, each with one warning naming file:line, the field and why,
and counted by reason (``CounterSet.skipped``, served as ``gpu_pod_exporter_counters_skipped_rows``):

* ``not_readable_through_nvml``: a field we know but cannot serve (vGPU licensing, inventory strings),
  exactly like dcgm-exporter skips profiling rows the GPU lacks;
* ``unknown_field``: a name with the shape of a DCGM field or dcgm-exporter metric
  (``DCGM_FI_*``/``DCGM_EXP_*``, upper case) that no DCGM release we know has. Upstream's own files
  carry such rows (4.8.3's commented ``DCGM_FI_PROF_*_TOTAL`` rows that users uncomment, fields of
  DCGM releases newer than this exporter), so a newer field must never stop the exporter; the
  warning offers the closest known name in case it is a typo, and the counter makes it alertable;
* ``duplicate``: a second row for a name already selected (the first one wins).

A row that does not even have that shape (``foo``, ``DCGM_FI_DEV GPU_TEMP``), a wrong column count, an
unknown Prometheus type or a type that does not fit the field is malformed: an error naming file,
line and key (exit code 2), because no DCGM release could make sense of it.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType

from exporter.inputfile import InputFileError, read_text
from exporter.metrics.catalog import CATALOG, NEWEST_KNOWN_DCGM_EXPORTER, Catalog, FieldSpec

PROMETHEUS_TYPES = ("gauge", "counter", "histogram", "summary", "label")
BUILTIN_NAME = "(built-in default-counters.csv)"

# The shape of every DCGM field name (DCGM_FI_...) and dcgm-exporter metric (DCGM_EXP_...) of any release: a
# row with this shape that we do not know is a newer release's field (or a typo), skipped with a warning.
DCGM_NAME_SHAPE = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")

# Why a row was skipped: the label values of gpu_pod_exporter_counters_skipped_rows, each always present.
SKIP_UNKNOWN_FIELD = "unknown_field"
SKIP_NOT_READABLE = "not_readable_through_nvml"
SKIP_DUPLICATE = "duplicate"
SKIP_REASONS = (SKIP_UNKNOWN_FIELD, SKIP_NOT_READABLE, SKIP_DUPLICATE)


def _no_skips() -> Mapping[str, int]:
    return MappingProxyType(dict.fromkeys(SKIP_REASONS, 0))


class CounterFileError(Exception):
    """A malformed counters file; ``str(self)`` is one line naming file, line and key."""

    def __init__(self, path: str, line: int, key: str, message: str) -> None:
        self.path = path
        self.line = line
        self.key = key
        self.message = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {key}: {message}")


@dataclass(frozen=True)
class CounterRow:
    """One active row: the metric name exactly as written (it becomes the Prometheus name)."""

    name: str
    prom_type: str
    help: str
    spec: FieldSpec
    line: int


@dataclass(frozen=True)
class CounterSet:
    """The rows that will be exported, the label rows, and warnings about rows that were skipped."""

    source: str
    metrics: tuple[CounterRow, ...]
    labels: tuple[CounterRow, ...]
    warnings: tuple[str, ...] = ()
    # Rows skipped, by reason (every SKIP_REASONS key): what gpu_pod_exporter_counters_skipped_rows serves for
    # the counters in use, so a field that silently stopped being exported (a newer DCGM's name) is alertable.
    skipped: Mapping[str, int] = field(default_factory=_no_skips, hash=False)

    def field_specs(self) -> tuple[FieldSpec, ...]:
        return tuple(row.spec for row in (*self.metrics, *self.labels))

    def has(self, name: str) -> bool:
        return any(row.name == name for row in self.metrics)


def default_counters_text() -> str:
    return resources.files("exporter.metrics").joinpath("data/default-counters.csv").read_text(encoding="utf-8")


def load_counters(path: str | None, catalog: Catalog = CATALOG) -> CounterSet:
    """Load ``path`` (or the built-in default when empty/None)."""
    if not path:
        return parse_counters(default_counters_text(), BUILTIN_NAME, catalog)
    try:
        text = read_text(path)
    except InputFileError as exc:
        reason = str(exc)
        reason = reason.replace("cannot read", "cannot read counters file", 1) if reason.startswith("cannot read") \
            else f"counters file {reason}"
        raise CounterFileError(path, 0, "collectors", reason) from None
    return parse_counters(text, path, catalog)


def parse_counters(text: str, source: str, catalog: Catalog = CATALOG) -> CounterSet:
    metrics: list[CounterRow] = []
    labels: list[CounterRow] = []
    warnings: list[str] = []
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    seen: dict[str, int] = {}
    duplicates: dict[str, list[int]] = {}

    # Lines end at "\n" (or "\r\n") only: str.splitlines() would also split inside a field at U+2028,
    # U+0085 or a form feed, and the error would then name a line that does not exist in an editor.
    lines = text.removeprefix("\ufeff").split("\n")
    for line_number, line in enumerate(lines, start=1):
        raw_line = line.removesuffix("\r")
        stripped = raw_line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, prom_type, help_text = _checked_record(raw_line, source, line_number)
        spec = catalog.lookup(name)
        if spec is None:
            reason, warning = _unknown_field(name, source, line_number, catalog)
            skipped[reason] += 1
            warnings.append(warning)
            continue
        if not spec.served:
            skipped[SKIP_NOT_READABLE] += 1
            warnings.append(f"{source}:{line_number}: {name}: not served by this exporter ({spec.nvml_source}); "
                            "the row is skipped")
            continue
        if (prom_type == "label") != spec.is_label:
            expected = "label" if spec.is_label else "a metric type (gauge, counter, ...)"
            raise CounterFileError(source, line_number, name, f"type {prom_type!r} does not fit this field: "
                                   f"expected {expected}")
        if name in seen:
            skipped[SKIP_DUPLICATE] += 1
            duplicates.setdefault(name, []).append(line_number)
            continue
        seen[name] = line_number
        row = CounterRow(name=name, prom_type=prom_type, help=help_text or spec.help, spec=spec, line=line_number)
        (labels if prom_type == "label" else metrics).append(row)

    warnings.extend(_duplicate_warnings(source, seen, duplicates))
    if not metrics:
        warnings.append(f"{source}: selects no DCGM field to export (the file is empty, all comments, or every row "
                        "was skipped): only the exporter's own metrics will be served")
    return CounterSet(source=source, metrics=tuple(metrics), labels=tuple(labels), warnings=tuple(warnings),
                      skipped=MappingProxyType(skipped))


def _checked_record(raw_line: str, source: str, line_number: int) -> tuple[str, str, str]:
    """One row's (DCGM field, Prometheus type in lower case, help); ``CounterFileError`` for a malformed row."""
    record = _parse_record(raw_line, source, line_number)
    if len(record) != 3:
        raise CounterFileError(
            source, line_number, _short(record[0]) if record else "row",
            f"expected 3 columns (DCGM field, Prometheus type, help), found {len(record)}"
            + (" — quote help text that contains commas" if len(record) > 3 else ""))
    name, prom_type, help_text = record
    if not name:
        raise CounterFileError(source, line_number, "field", "empty DCGM field name")
    if prom_type.lower() not in PROMETHEUS_TYPES:
        expected = ", ".join(PROMETHEUS_TYPES)
        raise CounterFileError(source, line_number, _short(name),
                               f"unknown Prometheus type {_short(prom_type)!r} (expected one of {expected})")
    return name, prom_type.lower(), help_text


def _unknown_field(name: str, source: str, line_number: int, catalog: Catalog) -> tuple[str, str]:
    """A field the catalog does not serve: (skip reason, warning) for a DCGM name (a known field NVML cannot
    read, or one of a DCGM release newer than ours); ``CounterFileError`` for a name that is no DCGM name."""
    where = f"{source}:{line_number}"
    if catalog.is_known_dcgm_name(name):
        return SKIP_NOT_READABLE, (f"{where}: {name}: this DCGM field cannot be read through NVML by this exporter; "
                                   "the row is skipped")
    hint = difflib.get_close_matches(name, catalog.all_names(), n=1)
    if DCGM_NAME_SHAPE.match(name):
        return SKIP_UNKNOWN_FIELD, (f"{where}: {name}: not a field of any DCGM release this exporter knows (newest "
                                    f"known dcgm-exporter: {NEWEST_KNOWN_DCGM_EXPORTER}): a newer DCGM's field, or a "
                                    "typo" + (f" — did you mean {hint[0]}?" if hint else "") + "; the row is skipped")
    raise CounterFileError(source, line_number, _short(name), "not a DCGM field name (expected DCGM_FI_... or "
                           "DCGM_EXP_..., upper case, or a dcgm-exporter 1.x name)"
                           + (f"; did you mean {hint[0]}?" if hint else ""))


def _duplicate_warnings(source: str, seen: dict[str, int], duplicates: dict[str, list[int]]) -> list[str]:
    """One warning per duplicated field, however many copies: where the first copy and the others are."""
    warnings = []
    for name, repeated in duplicates.items():
        first, more = repeated[0], repeated[1:]
        also = ""
        if more:
            also = f" (also at lines {', '.join(str(line) for line in more[:5])}" + \
                (f" and {len(more) - 5} more" if len(more) > 5 else "") + ")"
        warnings.append(f"{source}:{first}: {name}: duplicate of line {seen[name]}{also}; "
                        f"the row{'s are' if more else ' is'} skipped")
    return warnings


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _parse_record(raw_line: str, source: str, line_number: int) -> list[str]:
    try:
        rows = list(csv.reader(io.StringIO(raw_line), skipinitialspace=True, strict=True))
    except csv.Error as exc:
        raise CounterFileError(source, line_number, "row", f"malformed CSV: {exc}") from None
    return [cell.strip() for cell in rows[0]] if rows else []
