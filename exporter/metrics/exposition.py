"""Encoding metric families into the Prometheus text format (0.0.4) and OpenMetrics 1.0.

Families are prometheus-client ``Metric`` objects, so everything that builds them uses the
library's data model. The byte encoding is ours for two reasons the compatibility contract forces:

* dcgm-exporter's counters do not end in ``_total`` (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``).
  prometheus-client's text writer renames a counter family's ``# TYPE`` line to ``<name>_total``,
  which would detach the type from the samples. We keep the name exactly as the CSV gives it.
* dcgm-exporter orders labels ``gpu, UUID, pci_bus_id, device, modelName, ...``; the library sorts
  them alphabetically. We keep insertion order, so our lines diff cleanly against dcgm-exporter's.

Escaping follows the exposition format specification exactly (label values: backslash, double
quote and newline; help text: backslash and newline), and the tests parse every output back with
prometheus-client's own parsers and lint it with promtool.

In OpenMetrics a counter's samples must end in ``_total``; renaming dcgm-exporter's counters would
rename the stored series, and declaring them ``unknown`` (same samples, same names) would make
Prometheus store them as ``unknown`` (its ``/api/v1/metadata``, Grafana's metric browser, rate()
hints). So content negotiation (``wants_openmetrics``) answers in the text format whenever the
exposition holds such a counter and the client accepts text, as Prometheus always does: that is what
dcgm-exporter serves to every client, and there ``# TYPE ... counter`` survives. OpenMetrics goes
out when it loses nothing (every counter ends in ``_total``) or when the client accepts nothing
else; only then are those families declared ``unknown``.

Every string encodes: a lone UTF-16 surrogate (which JSON can carry as ``"\\ud800"``, e.g. in a pod
or namespace label value from the API) has no UTF-8 form and becomes U+FFFD, the replacement
character Go's encoders also write for invalid text. Failing instead would drop the whole exposition
for one odd label value.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


_SURROGATES = re.compile("[\ud800-\udfff]")


def to_utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text``; lone surrogates (not encodable) become U+FFFD instead of an error."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text).encode("utf-8")


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integers as integers (DCGM's INT64 fields print like dcgm-exporter's ``%d``), floats as Go does."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{escape_label_value(value)}"' for key, value in labels.items()) + "}"


class _LabelTexts:
    """The ``{...}`` text of each distinct label set, escaped once per encoding.

    Why: a GPU's label set (identity, Hostname, workload labels) repeats in every family, so one
    exposition has tens of series per distinct set. Escaping and joining each sample's labels again was
    most of an encoding's CPU (four times the render itself at 64 GPUs), and it runs on the renderer
    thread once per sample while scrapes wait for the GIL. Keyed by the label pairs, in order, so two
    sets with the same content share one text and the output is byte for byte what ``_labels`` writes.
    """

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        self._texts: dict[tuple[tuple[str, str], ...], str] = {}

    def __call__(self, labels: Mapping[str, str]) -> str:
        key = tuple(labels.items())
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = _labels(labels)
        return text


def encode_text(families: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4."""
    out: list[str] = []
    label_text = _LabelTexts()
    for family in families:
        if not family.samples:
            continue
        type_name = "untyped" if family.type == "unknown" else family.type
        name = family.name
        if type_name == "counter" and all(sample.name == name + "_total" for sample in family.samples):
            name += "_total"  # text 0.0.4 names the family like its samples (an OpenMetrics-style family)
        out.append(f"# HELP {name} {escape_help(family.documentation)}\n")
        out.append(f"# TYPE {name} {type_name}\n")
        out.extend(f"{sample.name}{label_text(sample.labels)} {format_value(sample.value)}\n"
                   for sample in family.samples)
    return to_utf8("".join(out))


def encode_openmetrics(families: Iterable[Metric]) -> bytes:
    """OpenMetrics 1.0 text, terminated by ``# EOF``."""
    out: list[str] = []
    label_text = _LabelTexts()
    for family in families:
        if not family.samples:
            continue
        name, type_name = family.name, family.type
        if type_name == "counter":
            if all(sample.name.endswith("_total") for sample in family.samples):
                name = name.removesuffix("_total")
            else:
                type_name = "unknown"
        out.append(f"# HELP {name} {escape_help(family.documentation)}\n")
        out.append(f"# TYPE {name} {type_name}\n")
        out.extend(f"{sample.name}{label_text(sample.labels)} {format_value(sample.value)}\n"
                   for sample in family.samples)
    out.append("# EOF\n")
    return to_utf8("".join(out))


def counters_need_text(families: Iterable[Metric]) -> bool:
    """True when OpenMetrics would demote a counter to ``unknown`` (a sample without ``_total``)."""
    return any(family.type == "counter" and family.samples
               and not all(sample.name.endswith("_total") for sample in family.samples)
               for family in families)


def accept_qualities(accept: str) -> tuple[float, float]:
    """The client's weights (``q``) for OpenMetrics and for the text format; -1 when not listed."""
    best_om = best_text = -1.0
    for part in accept.split(","):
        media, *params = (piece.strip() for piece in part.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        if media == "application/openmetrics-text":
            best_om = max(best_om, quality)
        elif media in {"text/plain", "*/*", "text/*"}:
            best_text = max(best_text, quality)
    return best_om, best_text


def wants_openmetrics(accept: str, *, counters_need_text: bool = False) -> bool:
    """Answer in OpenMetrics? Only when the client weighs it at least as high as the text format,
    and, for an exposition whose counters OpenMetrics would type ``unknown``, only when the client
    accepts no text at all (see the module docstring)."""
    best_om, best_text = accept_qualities(accept)
    if best_om <= 0:
        return False
    if counters_need_text and best_text > 0:
        return False
    return best_om >= best_text


def gzip_bytes(data: bytes) -> bytes:
    # Level 6 is zlib's default balance; mtime=0 keeps the output deterministic for caching and tests.
    return gzip.compress(data, compresslevel=6, mtime=0)
