"""dcgm-exporter 4.8.3's ``--config-file`` YAML (``version: 1``), read into this exporter's settings.

4.8.3 added a YAML file whose schema is not the flag names: ``version: 1``, ``metrics`` (``file``: a
counters CSV, or ``fields``: the rows inline as ``{name, prometheusType, help}``) and ``collection``
(``interval`` in milliseconds, ``watchGroups`` with per-field intervals). Upstream rejects unknown
keys, and so does this reader, naming ``file:line`` and the key. A file with a ``version`` key is
read here; any other file keeps this exporter's format (keys are the long flag names).

What maps: ``metrics.file`` -> ``--collectors``, ``metrics.fields`` -> the counters (as a CSV would
give them), ``collection.interval`` -> ``--collect-interval``. ``watchGroups`` are accepted and
validated, and one start-up line says that every field is sampled at the collection interval here
(one NVML sampling cycle for all fields is what keeps the cost per GPU flat).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from exporter.config import _BY_ATTR, ConfigError, _convert, _parse_go_duration
from exporter.safeyaml import YamlValue

SUPPORTED_VERSION = 1
_TOP = ("version", "metrics", "collection")
_METRICS = ("file", "fields")
_FIELD = ("name", "prometheusType", "help")
_COLLECTION = ("interval", "watchGroups")
_GROUP = ("name", "interval", "fields")


def _mapping(value: YamlValue, allowed: tuple[str, ...]) -> dict[str, YamlValue]:
    """The keys of a mapping; unknown or repeated keys refused (the shared reader, file:line: key)."""
    return value.mapping(allowed, more="dcgm-exporter's config file (version 1)")


def _scalar(value: YamlValue) -> Any:
    raw = value.scalar()
    if raw is None:
        raise value.error("expected a single value")
    return raw


def _where(value: YamlValue) -> str:
    return f"{value.source}:{value.line}"


def _interval_ms(raw: object, where: str, key: str) -> int:
    """Milliseconds as a number (as ``-c``), or a Go duration (``30s``)."""
    if isinstance(raw, str) and not raw.strip().isdigit():
        try:
            return round(_parse_go_duration(raw) * 1000)
        except ValueError as exc:
            raise ConfigError(where, key, str(exc)) from None
    return int(_convert(_BY_ATTR["collect_interval_ms"], raw, where))


def _fields_csv(node: YamlValue) -> str:
    if not node.is_sequence() or not node.node.value:
        raise node.error("expected a list of {name, prometheusType, help}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for item in node.sequence():
        entries = _mapping(item, _FIELD)
        row = []
        for key in _FIELD:
            if key not in entries:
                raise item.error("missing", path=f"metrics.fields[].{key}")
            row.append(str(_scalar(entries[key])))
        writer.writerow(row)
    return out.getvalue()


def load_upstream_config(root: YamlValue) -> dict[str, tuple[Any, str]]:
    """Settings from a dcgm-exporter 4.8.3 config file: ``attr -> (value, file:line)``.

    Besides option attributes, the result holds ``upstream_format`` (for --dcgm-exporter-compat auto)
    and may hold ``inline_counters`` (CSV text), ``inline_counters_source`` and ``notes`` (lines to
    log at start).
    """
    top = _mapping(root, _TOP)
    version_value = top["version"]
    version_where = _where(version_value)
    version = _scalar(version_value)
    if version != SUPPORTED_VERSION:
        raise version_value.error(f"unsupported version {version!r}: dcgm-exporter's config "
                                  f"file version {SUPPORTED_VERSION} is read here")
    result: dict[str, tuple[Any, str]] = {"upstream_format": (True, version_where)}
    notes: list[str] = []
    if "metrics" in top:
        metrics = _mapping(top["metrics"], _METRICS)
        if "file" in metrics and "fields" in metrics:
            raise metrics["fields"].error("give either metrics.file or metrics.fields")
        if "file" in metrics:
            result["collectors"] = (str(_scalar(metrics["file"])), _where(metrics["file"]))
        if "fields" in metrics:
            where = _where(metrics["fields"])
            result["inline_counters"] = (_fields_csv(metrics["fields"]), where)
            result["inline_counters_source"] = (where, where)
    if "collection" in top:
        collection = _mapping(top["collection"], _COLLECTION)
        if "interval" in collection:
            interval = collection["interval"]
            result["collect_interval_ms"] = (_interval_ms(_scalar(interval), _where(interval),
                                                          "collection.interval"), _where(interval))
        if "watchGroups" in collection:
            groups = collection["watchGroups"]
            if not groups.is_sequence():
                raise groups.error("expected a list of {name, interval, fields}")
            for group in groups.sequence():
                entries = _mapping(group, _GROUP)
                if "interval" in entries:
                    _interval_ms(_scalar(entries["interval"]), _where(entries["interval"]),
                                 "collection.watchGroups[].interval")
            notes.append(f"{_where(groups)}: collection.watchGroups: per-group intervals are not used here; every "
                         "field is sampled at the collection interval (one NVML cycle for all fields)")
    if notes:
        result["notes"] = (tuple(notes), root.source)
    return result
