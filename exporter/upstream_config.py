"""dcgm-exporter's ``--config-file`` YAML (``version: 1`` from 4.6.0-4.8.3, ``version: 2`` from
4.6.1-4.8.4), read into this exporter's settings.

The schema is not the flag names. Version 1 (as 4.8.4 reads it, a superset of 4.8.3's):
``metrics`` (``file`` a counters CSV, or ``fields`` the rows inline as ``{name, prometheusType, help}``;
``enableExporterMetrics``), ``collection`` (``interval``, ``retention``, ``watchGroups``), ``sources``
(``dcgm.detectBindUnbind``) and ``server`` (``maxConcurrentScrapes``). Version 2 replaces ``collection``
with named ``collections`` (``every``, ``metrics.include`` patterns, ``sources.dcgm.watch``) and adds
``sources.dcgm.watch``; the two cannot be mixed. The keys are upstream's own
(upstream/dcgm-exporter/4.6.1-4.8.4.json, ``config_file``). Upstream rejects unknown keys, and so does
this reader, naming ``file:line`` and the key. A file with a ``version`` key is read here; any other file
keeps this exporter's format (keys are the long flag names).

What maps: ``metrics.file`` -> ``--collectors``, ``metrics.fields`` -> the counters (as a CSV would give
them), the collection interval (version 1's ``collection.interval``, version 2's all-fields collection,
the one whose ``metrics.include`` has ``*``) -> ``--collect-interval``, and every other key to the flag
of the same meaning (``server.maxConcurrentScrapes`` -> ``--max-concurrent-scrapes`` and so on), which
says at start what differs here. Per-group intervals are accepted and validated, and one start-up line
says that every field is sampled at the collection interval here (one NVML sampling cycle for all
fields is what keeps the cost per GPU flat).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from exporter.options import ConfigError, Option, convert, parse_duration_s
from exporter.safeyaml import YamlValue

SUPPORTED_VERSIONS = (1, 2)
_FIELD = ("name", "prometheusType", "help")
_METRICS = ("file", "fields", "enableExporterMetrics")
_WATCH = ("maxKeepAge", "maxKeepSamples")
_RETENTION = ("maxAge", "maxSamples")
_BIND_UNBIND = ("enabled", "pollInterval")
_SERVER = ("maxConcurrentScrapes",)
_TOP = {1: ("version", "metrics", "collection", "sources", "server"),
        2: ("version", "metrics", "collections", "sources", "server")}
_SOURCES = {1: ("dcgm",), 2: ("dcgm",)}
_DCGM_SOURCE = {1: ("detectBindUnbind",), 2: ("watch", "detectBindUnbind")}
_COLLECTION = ("interval", "retention", "watchGroups")
_GROUP = ("name", "interval", "fields", "retention")
_COLLECTIONS_ITEM = ("name", "every", "metrics", "sources")


class _Reader:
    """One file's settings, gathered as ``attr -> (value, file:line)``."""

    def __init__(self, version: int, options: Mapping[str, Option]) -> None:
        self.version = version
        self.options = options  # exporter.config's settings by attribute (it passes them: no import back)
        self.result: dict[str, tuple[Any, str]] = {}
        self.notes: list[str] = []

    def mapping(self, value: YamlValue, allowed: tuple[str, ...]) -> dict[str, YamlValue]:
        """The keys of a mapping; unknown or repeated keys refused (the shared reader, file:line: key)."""
        return value.mapping(allowed, more=f"dcgm-exporter's config file (version {self.version})")

    def set(self, attr: str, value: YamlValue) -> None:
        """The setting of option ``attr`` from a scalar, parsed as its flag would be."""
        raw = _scalar(value)
        self.result[attr] = (convert(self.options[attr], raw, _where(value)), _where(value))

    def duration_ms(self, raw: object, where: str, key: str, *, allow_zero: bool = False) -> int:
        return _duration_ms(raw, where, key, self.options["collect_interval_ms"], allow_zero=allow_zero)

    def interval_ms(self, raw: object, where: str, key: str) -> int:
        """The collection interval: milliseconds as a number (as ``-c``), or a Go duration (``30s``)."""
        interval = self.options["collect_interval_ms"]
        return int(convert(interval, self.duration_ms(raw, where, key), where))

    def metrics(self, node: YamlValue) -> None:
        metrics = self.mapping(node, _METRICS)
        if "file" in metrics and "fields" in metrics:
            raise metrics["fields"].error("give either metrics.file or metrics.fields")
        if "file" in metrics:
            self.result["collectors"] = (str(_scalar(metrics["file"])), _where(metrics["file"]))
        if "fields" in metrics:
            where = _where(metrics["fields"])
            self.result["inline_counters"] = (_fields_csv(self, metrics["fields"]), where)
            self.result["inline_counters_source"] = (where, where)
        if "enableExporterMetrics" in metrics:
            self.set("enable_exporter_metrics", metrics["enableExporterMetrics"])

    def sources(self, node: YamlValue) -> None:
        dcgm = self.mapping(node, _SOURCES[self.version]).get("dcgm")
        if dcgm is None:
            return
        entries = self.mapping(dcgm, _DCGM_SOURCE[self.version])
        if "watch" in entries:
            self.watch(entries["watch"], _WATCH)
        if "detectBindUnbind" in entries:
            detect = self.mapping(entries["detectBindUnbind"], _BIND_UNBIND)
            if "enabled" in detect:
                self.set("enable_gpu_bind_unbind_watch", detect["enabled"])
            if "pollInterval" in detect:
                self.set("gpu_bind_unbind_poll_interval", detect["pollInterval"])

    def watch(self, node: YamlValue, keys: tuple[str, str], *, default: bool = True) -> None:
        """DCGM's field-watch retention (``watch`` in version 2, ``retention`` in version 1)."""
        entries = self.mapping(node, keys)
        age, samples = keys
        if age in entries:
            self.duration_ms(_scalar(entries[age]), _where(entries[age]), age, allow_zero=True)
            if default:
                self.set("watch_max_keep_age", entries[age])
        if samples in entries:
            if default:
                self.set("watch_max_keep_samples", entries[samples])
            else:
                convert(self.options["watch_max_keep_samples"], _scalar(entries[samples]), _where(entries[samples]))

    def server(self, node: YamlValue) -> None:
        server = self.mapping(node, _SERVER)
        if "maxConcurrentScrapes" in server:
            self.set("max_concurrent_scrapes", server["maxConcurrentScrapes"])

    def collection(self, node: YamlValue) -> None:
        """Version 1's one ``collection`` block."""
        collection = self.mapping(node, _COLLECTION)
        if "interval" in collection:
            self.interval(collection["interval"], "collection.interval")
        if "retention" in collection:
            self.watch(collection["retention"], _RETENTION)
        if "watchGroups" in collection:
            groups = collection["watchGroups"]
            if not groups.is_sequence():
                raise groups.error("expected a list of {name, interval, fields}")
            for group in groups.sequence():
                entries = self.mapping(group, _GROUP)
                if "interval" in entries:
                    self.duration_ms(_scalar(entries["interval"]), _where(entries["interval"]),
                                 "collection.watchGroups[].interval")
                if "retention" in entries:
                    self.watch(entries["retention"], _RETENTION, default=False)
            self.notes.append(f"{_where(groups)}: collection.watchGroups: per-group intervals are not used here; "
                              "every field is sampled at the collection interval (one NVML cycle for all fields)")

    def collections(self, node: YamlValue) -> None:
        """Version 2's named ``collections``: the one that includes every field (``*``) sets the interval."""
        if not node.is_sequence() or not node.node.value:
            raise node.error("expected a list of {name, every, metrics: {include: [...]}}")
        narrower: list[str] = []
        for item in node.sequence():
            entries = self.mapping(item, _COLLECTIONS_ITEM)
            if "name" not in entries:
                raise item.error("missing", path="collections[].name")
            name = str(_scalar(entries["name"]))
            patterns = self.include(entries["metrics"]) if "metrics" in entries else []
            if "sources" in entries:
                dcgm = self.mapping(entries["sources"], ("dcgm",)).get("dcgm")
                if dcgm is not None and "watch" in (watch := self.mapping(dcgm, ("watch",))):
                    self.watch(watch["watch"], _WATCH, default=False)
            if "every" in entries:
                if "*" in patterns:
                    self.interval(entries["every"], "collections[].every")
                else:
                    self.duration_ms(_scalar(entries["every"]), _where(entries["every"]), "collections[].every")
                    narrower.append(name)
        if narrower:
            self.notes.append(f"{_where(node)}: collections {', '.join(narrower)}: per-collection intervals are not "
                              "used here; every field is sampled at the all-fields collection's interval (one NVML "
                              "cycle for all fields)")

    def include(self, node: YamlValue) -> list[str]:
        include = self.mapping(node, ("include",)).get("include")
        if include is None:
            return []
        if not include.is_sequence():
            raise include.error("expected a list of DCGM field names or patterns")
        return [str(_scalar(item)) for item in include.sequence()]

    def interval(self, node: YamlValue, key: str) -> None:
        self.result["collect_interval_ms"] = (self.interval_ms(_scalar(node), _where(node), key), _where(node))


def _scalar(value: YamlValue) -> Any:
    raw = value.scalar()
    if raw is None:
        raise value.error("expected a single value")
    return raw


def _where(value: YamlValue) -> str:
    return f"{value.source}:{value.line}"


def _duration_ms(raw: object, where: str, key: str, interval: Option, *, allow_zero: bool = False) -> int:
    """A Go duration (``30s``) or a number of milliseconds, as dcgm-exporter's config takes them."""
    if isinstance(raw, str) and not raw.strip().isdigit():
        if allow_zero and raw.strip() in ("0", "0s"):
            return 0
        try:
            return round(parse_duration_s(raw) * 1000)
        except ValueError as exc:
            raise ConfigError(where, key, str(exc)) from None
    return int(convert(interval, raw, where)) if not allow_zero else int(str(raw))


def _fields_csv(reader: _Reader, node: YamlValue) -> str:
    if not node.is_sequence() or not node.node.value:
        raise node.error("expected a list of {name, prometheusType, help}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for item in node.sequence():
        entries = reader.mapping(item, _FIELD)
        row = []
        for key in _FIELD:
            if key not in entries:
                raise item.error("missing", path=f"metrics.fields[].{key}")
            row.append(str(_scalar(entries[key])))
        writer.writerow(row)
    return out.getvalue()


def load_upstream_config(root: YamlValue, options: Mapping[str, Option]) -> dict[str, tuple[Any, str]]:
    """Settings from a dcgm-exporter config file: ``attr -> (value, file:line)``, each parsed by its
    option in ``options`` (``exporter.config``'s, by attribute).

    Besides option attributes, the result holds ``upstream_format`` and may hold ``inline_counters``
    (CSV text), ``inline_counters_source`` and ``notes`` (lines to log at start).
    """
    version_value = root.mapping().get("version")
    if version_value is None:  # pragma: no cover - the caller reads this format only when the key exists
        raise root.error("missing", path="version")
    version = _scalar(version_value)
    if version not in SUPPORTED_VERSIONS:
        raise version_value.error(f"unsupported version {version!r}: dcgm-exporter's config file versions "
                                  f"{' and '.join(str(v) for v in SUPPORTED_VERSIONS)} are read here")
    reader = _Reader(int(version), options)
    top_keys = {key for key, _ in ((k.value, v) for k, v in root.node.value)}
    other = 2 if version == 1 else 1
    for key in ("collection", "collections"):
        if key in top_keys and key not in _TOP[reader.version] and key in _TOP[other]:
            has = "collections" if version == 2 else "collection"
            raise root.mapping()[key].error(f"a version {other} key: the two versions cannot be mixed "
                                            f"(version {version} has {has})")
    top = reader.mapping(root, _TOP[reader.version])
    reader.result["upstream_format"] = (True, _where(version_value))
    for key, read in (("metrics", reader.metrics), ("collection", reader.collection),
                      ("collections", reader.collections), ("sources", reader.sources), ("server", reader.server)):
        if key in top:
            read(top[key])
    if reader.notes:
        reader.result["notes"] = (tuple(reader.notes), root.source)
    return reader.result
