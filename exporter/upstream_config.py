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

import yaml

from exporter import safeyaml
from exporter.config import _BY_ATTR, ConfigError, _convert, _parse_go_duration

SUPPORTED_VERSION = 1
_TOP = ("version", "metrics", "collection")
_METRICS = ("file", "fields")
_FIELD = ("name", "prometheusType", "help")
_COLLECTION = ("interval", "watchGroups")
_GROUP = ("name", "interval", "fields")


def _mapping(path: str, node: yaml.Node, key: str, allowed: tuple[str, ...]) -> dict[str, tuple[yaml.Node, str]]:
    """The keys of a mapping node with their value nodes and ``file:line``; unknown or repeated keys refused."""
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{path}:{node.start_mark.line + 1}", key, "expected a mapping")
    found: dict[str, tuple[yaml.Node, str]] = {}
    for key_node, value_node in node.value:
        where = f"{path}:{key_node.start_mark.line + 1}"
        name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
        full = f"{key}.{name}" if key else name
        if name not in allowed:
            raise ConfigError(where, full[:60], safeyaml.unknown_key(name, allowed,
                                                                  "dcgm-exporter's config file (version 1)"))
        if name in found:
            raise ConfigError(where, full, "duplicate key")
        found[name] = (value_node, where)
    return found


def _scalar(node: yaml.Node, where: str, key: str) -> Any:
    try:
        value = safeyaml.construct(node)
    except safeyaml.YamlInputError as exc:
        raise ConfigError(where, key, exc.message) from None
    if value is None or isinstance(value, list | dict):
        raise ConfigError(where, key, "expected a single value")
    return value


def _interval_ms(raw: object, where: str, key: str) -> int:
    """Milliseconds as a number (as ``-c``), or a Go duration (``30s``)."""
    if isinstance(raw, str) and not raw.strip().isdigit():
        try:
            return round(_parse_go_duration(raw) * 1000)
        except ValueError as exc:
            raise ConfigError(where, key, str(exc)) from None
    return int(_convert(_BY_ATTR["collect_interval_ms"], raw, where))


def _fields_csv(path: str, node: yaml.Node, where: str) -> str:
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise ConfigError(where, "metrics.fields", "expected a list of {name, prometheusType, help}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for item in node.value:
        entries = _mapping(path, item, "metrics.fields[]", _FIELD)
        row = []
        for key in _FIELD:
            if key not in entries:
                raise ConfigError(f"{path}:{item.start_mark.line + 1}", f"metrics.fields[].{key}", "missing")
            value_node, value_where = entries[key]
            row.append(str(_scalar(value_node, value_where, f"metrics.fields[].{key}")))
        writer.writerow(row)
    return out.getvalue()


def load_upstream_config(path: str, root: yaml.MappingNode) -> dict[str, tuple[Any, str]]:
    """Settings from a dcgm-exporter 4.8.3 config file: ``attr -> (value, file:line)``.

    Besides option attributes, the result holds ``upstream_format`` (for --dcgm-exporter-compat auto)
    and may hold ``inline_counters`` (CSV text), ``inline_counters_source`` and ``notes`` (lines to
    log at start).
    """
    top = _mapping(path, root, "", _TOP)
    version_node, version_where = top["version"]
    version = _scalar(version_node, version_where, "version")
    if version != SUPPORTED_VERSION:
        raise ConfigError(version_where, "version", f"unsupported version {version!r}: dcgm-exporter's config "
                          f"file version {SUPPORTED_VERSION} is read here")
    result: dict[str, tuple[Any, str]] = {"upstream_format": (True, version_where)}
    notes: list[str] = []
    if "metrics" in top:
        metrics = _mapping(path, top["metrics"][0], "metrics", _METRICS)
        if "file" in metrics and "fields" in metrics:
            raise ConfigError(metrics["fields"][1], "metrics.fields", "give either metrics.file or metrics.fields")
        if "file" in metrics:
            node, where = metrics["file"]
            result["collectors"] = (str(_scalar(node, where, "metrics.file")), where)
        if "fields" in metrics:
            node, where = metrics["fields"]
            result["inline_counters"] = (_fields_csv(path, node, where), where)
            result["inline_counters_source"] = (where, where)
    if "collection" in top:
        collection = _mapping(path, top["collection"][0], "collection", _COLLECTION)
        if "interval" in collection:
            node, where = collection["interval"]
            result["collect_interval_ms"] = (_interval_ms(_scalar(node, where, "collection.interval"), where,
                                                          "collection.interval"), where)
        if "watchGroups" in collection:
            node, where = collection["watchGroups"]
            if not isinstance(node, yaml.SequenceNode):
                raise ConfigError(where, "collection.watchGroups", "expected a list of {name, interval, fields}")
            for group in node.value:
                entries = _mapping(path, group, "collection.watchGroups[]", _GROUP)
                if "interval" in entries:
                    group_node, group_where = entries["interval"]
                    _interval_ms(_scalar(group_node, group_where, "collection.watchGroups[].interval"),
                                 group_where, "collection.watchGroups[].interval")
            notes.append(f"{where}: collection.watchGroups: per-group intervals are not used here; every field is "
                         "sampled at the collection interval (one NVML cycle for all fields)")
    if notes:
        result["notes"] = (tuple(notes), path)
    return result
