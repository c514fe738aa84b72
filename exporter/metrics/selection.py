"""``-d/--devices``: which entities the counters CSV's rows are reported for (GPUs, MIG GPU instances).

dcgm-exporter's selector (its ``pkg/cmd/app.go``), same syntax here:

* ``f`` ("flex", dcgm-exporter's default): each GPU without GPU instances is reported as a GPU; a
  MIG-enabled GPU is reported only per GPU instance, and each instance series carries the chip-wide
  readings too (temperature, power, clocks, energy, ...), labelled with that instance's
  ``GPU_I_PROFILE``/``GPU_I_ID`` and the instance's pod;
* ``g`` / ``g:<ids>``: GPUs only (all, or those NVML indexes), MIG-enabled or not;
* ``i`` / ``i:<ids>``: GPU instances only (all, or those numbers); GPUs without MIG are not reported;
* ``g[:<ids>]+i[:<ids>]``: both (dcgm-exporter 4.8.3's combined form; the chart's values comment
  ``-d g+i`` needs it).

``<ids>`` is a comma list of numbers and ranges (``0,2-4``). dcgm-exporter numbers GPU instances by
DCGM entity id; DCGM assigns those across the node, GPU by GPU, so ``i:<ids>`` counts the node's
GPU instances from 0 in GPU index order, then GPU-instance id order. An id naming nothing is
reported once at start-up (a MIG layout can change later) instead of ending the process.

Without ``-d``, ``--mig-chip-series`` chooses the layout of MIG-enabled GPUs:

* ``per-instance`` (the default, as dcgm-exporter): the same entities as ``f``: a MIG-enabled GPU's
  chip-wide readings are repeated on every GPU instance's series, with its ``GPU_I_*`` and its pod, so
  dashboards that filter by pod show the chip's power and temperature. A ``sum`` over such readings
  counts the chip once per instance: the shipped rules, dashboards and the cost report deduplicate per
  chip first (``max by (<node label>, UUID)``);
* ``once`` (``DEFAULT`` below, this exporter's earlier layout): every GPU once with its own readings (a
  MIG-enabled GPU's chip-wide readings without ``GPU_I_*`` and without a pod), and every GPU instance
  with the readings NVML gives per instance (memory, profiling) with ``GPU_I_*``.

An explicit ``-d`` decides by itself; ``--mig-chip-series`` then has no effect.

Pure: ``select`` turns one snapshot into the (entity, values) pairs to render.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from exporter.metrics.catalog import CATALOG, Scope
from exporter.snapshot import DeviceReading, MigReading

FLEX = "f"
GPUS = "g"
INSTANCES = "i"

# --mig-chip-series: where a MIG-enabled GPU's chip-wide readings go when -d is not given.
CHIP_SERIES_PER_INSTANCE = "per-instance"
CHIP_SERIES_ONCE = "once"
CHIP_SERIES_LAYOUTS = (CHIP_SERIES_PER_INSTANCE, CHIP_SERIES_ONCE)


@dataclass(frozen=True)
class DeviceSelection:
    """A parsed ``-d`` value. ``*_ids`` None means "all"; ``text`` "" is the per-chip default."""

    text: str = ""
    flex: bool = False
    gpus: bool = False
    gpu_ids: frozenset[int] | None = None
    instances: bool = False
    instance_ids: frozenset[int] | None = None

    def __str__(self) -> str:
        return self.text or "per-chip"

    @property
    def is_default(self) -> bool:
        return not self.text


DEFAULT = DeviceSelection()
PER_INSTANCE = DeviceSelection(text=FLEX, flex=True)  # what -d f selects


def effective_selection(selection: DeviceSelection, mig_chip_series: str) -> DeviceSelection:
    """The selection to render: an explicit ``-d`` as given; without it, ``--mig-chip-series``'s layout.

    ``per-instance`` selects exactly what dcgm-exporter's default ``-d f`` does; ``once`` keeps the per-chip
    layout (``DEFAULT``).
    """
    if not selection.is_default:
        return selection
    return PER_INSTANCE if mig_chip_series == CHIP_SERIES_PER_INSTANCE else DEFAULT


def _parse_ids(letter: str, text: str, whole: str) -> frozenset[int]:
    ids: set[int] = set()
    for item in text.split(","):
        first, dash, last = item.strip().partition("-")
        try:
            start = int(first)
            end = int(last) if dash else start
        except ValueError:
            raise ValueError(f"invalid device selector {whole!r}: {item.strip()!r} is not a number or a "
                             f"range like 2-4 (e.g. {letter}:0,2-4)") from None
        if start < 0 or end < start:
            raise ValueError(f"invalid device selector {whole!r}: range {item.strip()!r} is empty or negative")
        ids.update(range(start, end + 1))
    return frozenset(ids)


def parse_devices(raw: object) -> DeviceSelection:
    """``f``, ``g[:ids]``, ``i[:ids]``, ``g[:ids]+i[:ids]``; "" is the per-chip default. ValueError says why not."""
    text = "" if raw is None else str(raw).strip()
    if not text:
        return DEFAULT
    if text == FLEX:
        return DeviceSelection(text=text, flex=True)
    values: dict[str, object] = {}
    for part in text.split("+"):
        letter, colon, ids = part.strip().partition(":")
        if letter == FLEX:
            raise ValueError(f"invalid device selector {text!r}: 'f' takes no range and cannot be combined")
        if letter not in (GPUS, INSTANCES):
            raise ValueError(f"invalid device selector {text!r}: expected f, g[:ids], i[:ids] or g[:ids]+i[:ids] "
                             "(ids like 0,2-4)")
        key = "gpus" if letter == GPUS else "instances"
        if key in values:
            raise ValueError(f"invalid device selector {text!r}: {letter!r} given twice")
        values[key] = True
        if colon:
            values[f"{key[:-1]}_ids"] = _parse_ids(letter, ids, text)
    return DeviceSelection(text=text, **values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Entity:
    """One reported entity: a GPU (``mig`` None) or a GPU instance, with the readings it carries."""

    reading: DeviceReading
    mig: MigReading | None
    values: Mapping[str, float]


def _chip_wide(values: Mapping[str, float]) -> dict[str, float]:
    """The readings of a GPU that describe the whole chip (not split per GPU instance)."""
    chip: dict[str, float] = {}
    for name, value in values.items():
        spec = CATALOG.lookup(name)
        if spec is not None and spec.scope is Scope.DEVICE:
            chip[name] = value
    return chip


def instance_numbers(readings: tuple[DeviceReading, ...]) -> dict[tuple[str, int], int]:
    """(GPU UUID, GPU-instance id) -> the node-wide number ``i:<ids>`` selects by (see the module docstring)."""
    numbers: dict[tuple[str, int], int] = {}
    for reading in sorted(readings, key=lambda item: item.identity.index):
        for mig in sorted(reading.mig, key=lambda item: item.identity.gpu_instance_id):
            numbers[(reading.identity.uuid, mig.identity.gpu_instance_id)] = len(numbers)
    return numbers


def select(selection: DeviceSelection, readings: tuple[DeviceReading, ...]) -> Iterator[Entity]:
    """The entities to render the CSV's rows for, in GPU order, each GPU's instances after it."""
    numbers = instance_numbers(readings) if selection.instances and selection.instance_ids is not None else {}
    for reading in readings:
        if not reading.up:
            continue
        index = reading.identity.index
        if selection.is_default:
            yield Entity(reading, None, reading.values)
            for mig in reading.mig:
                yield Entity(reading, mig, mig.values)
            continue
        has_instances = bool(reading.mig)
        if (selection.flex and not has_instances) or (
                selection.gpus and (selection.gpu_ids is None or index in selection.gpu_ids)):
            yield Entity(reading, None, reading.values)
        if not (selection.flex or selection.instances) or not has_instances:
            continue
        chip = _chip_wide(reading.values)
        for mig in reading.mig:
            wanted = selection.flex or selection.instance_ids is None or numbers.get(
                (reading.identity.uuid, mig.identity.gpu_instance_id)) in selection.instance_ids
            if wanted:
                yield Entity(reading, mig, {**chip, **mig.values})


def unknown_ids(selection: DeviceSelection, readings: tuple[DeviceReading, ...]) -> list[str]:
    """The ids of a ranged selection that name no GPU / GPU instance of this snapshot (for one warning)."""
    problems: list[str] = []
    if selection.gpu_ids is not None:
        indexes = {reading.identity.index for reading in readings}
        problems += [f"GPU {gpu}" for gpu in sorted(selection.gpu_ids - indexes)]
    if selection.instance_ids is not None:
        numbers = set(instance_numbers(readings).values())
        problems += [f"GPU instance {number}" for number in sorted(selection.instance_ids - numbers)]
    return problems
