"""Generated documentation: the README's flag table and metric tables come from the code.

The configuration table comes from ``config.OPTIONS``, the DCGM metric table from the catalog, and
the exporter-owned metric table from ``metrics.owned``. ``scripts/gen-docs.py`` rewrites the marked
sections of README.md; a test fails when they are out of date, so the README cannot drift.
"""

from __future__ import annotations

import re

from exporter.config import OPTIONS, Option
from exporter.metrics.catalog import CATALOG, FieldSpec
from exporter.metrics.counters import default_counters_text, parse_counters
from exporter.metrics.owned import OWNED, OwnedMetric

SECTION = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
                     re.DOTALL)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(option: Option) -> str:
    value = option.default
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, tuple):
        return "`" + ",".join(map(str, value)) + "`" if value else "(none)"
    if isinstance(value, float):  # a Go duration, in seconds
        return f"`{value:g}s`"
    if value in ("", None):
        return "(none)"
    return f"`{value}`"


def flags_table() -> str:
    rows = ["| Flag | Environment variable | Default | Meaning |", "|---|---|---|---|"]
    rows.append("| `--config-file` | `DCGM_EXPORTER_CONFIG_FILE` | (none) | YAML file whose keys are the long flag "
                "names (e.g. `collect-interval: 2000`), or dcgm-exporter's format (`version: 1` of 4.8.3/4.8.4, "
                "`version: 2` of 4.8.4; docs/migrate-from-dcgm-exporter.md); flags > environment > file > "
                "defaults. |")
    for option in OPTIONS:
        flags = ", ".join(f"`{flag}`" for flag in option.flags)
        rows.append(f"| {flags} | `{option.env}` | {_default(option)} | {_cell(option.help)} |")
    return "\n".join(rows) + "\n"


def dcgm_table() -> str:
    default_names = {row.name for row in parse_counters(default_counters_text(), "default").metrics}
    default_labels = {row.name for row in parse_counters(default_counters_text(), "default").labels}
    rows = ["| Metric | Default | Type | Unit | NVML source | Also accepted as |", "|---|---|---|---|---|---|"]
    # DCGM fields by id, then the exporter-owned DCGM_EXP_* rows (id 0: not DCGM fields).
    specs: list[FieldSpec] = sorted((spec for spec in CATALOG.fields if spec.served),
                                    key=lambda spec: (spec.field_id == 0, spec.field_id))
    for spec in specs:
        default = "yes" if spec.name in default_names or spec.name in default_labels else ""
        kind = "label" if spec.is_label else spec.prom_type
        aliases = ", ".join(f"`{alias}`" for alias in spec.aliases)
        rows.append(f"| `{spec.name}` | {default} | {kind} | {_cell(spec.unit) or '-'} | {_cell(spec.nvml_source)} "
                    f"| {aliases} |")
    return "\n".join(rows) + "\n"


def owned_table() -> str:
    rows = ["| Metric | Type | Unit | Labels (besides the GPU identity) | Meaning | Source |",
            "|---|---|---|---|---|---|"]
    metric: OwnedMetric
    for metric in OWNED:
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "-"
        unit = _cell(metric.unit) or "-"
        rows.append(f"| `{metric.name}` | {metric.type} | {unit} | {labels} | {_cell(metric.help)} "
                    f"| {_cell(metric.source)} |")
    return "\n".join(rows) + "\n"


GENERATORS = {"flags": flags_table, "dcgm-metrics": dcgm_table, "owned-metrics": owned_table}


def regenerate(text: str) -> str:
    """Replace every generated section of ``text`` with fresh content."""

    def replace(match: re.Match[str]) -> str:
        generator = GENERATORS.get(match.group("name"))
        if generator is None:
            return match.group(0)
        return match.group(1) + generator() + match.group(4)

    return SECTION.sub(replace, text)
