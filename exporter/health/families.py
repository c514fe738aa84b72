"""Metric families for Xid, clock events and GPU health, built from the ledgers and the snapshot.

Labels come from ``RenderContext`` (dcgm-exporter's base labels, CSV label rows, workload labels),
followed by each metric's own labels in dcgm-exporter's order (its attributes are sorted by name):
``err_code, err_msg``; ``window_size_in_ms, xid``; ``xid``; ``clock_event, window_size_in_ms``;
``clock_event``; and ``reason`` for the health gauge.

What a series means (also in the README):

* ``DCGM_FI_DEV_XID_ERRORS``: one series per GPU, value = the last Xid on the GPU (any instance),
  0 with ``err_msg="No Error"`` until the first one; plus one per known MIG instance with the last Xid
  attributed to it. A lost GPU keeps its series: its last Xid (often 79) is what the operator needs.
* ``DCGM_EXP_XID_ERRORS_TOTAL{xid}``: one series per GPU (or MIG instance) and code seen since the
  exporter started, with every event counted. A code appears at its first event (value >= 1).
* ``DCGM_EXP_XID_ERRORS_COUNT{window_size_in_ms, xid}``: one series per GPU (or MIG instance) and code
  seen since start, value = events within the window, back to 0 once they leave it (the series stays,
  so graphs and alerts see the drop). A GPU that has had no Xid since start has one series with value
  0 and no ``xid`` label, exactly like dcgm-exporter's empty window.
* ``DCGM_EXP_CLOCK_EVENTS_*``: per GPU that reports the reasons bitmask, one series per reason.
* ``DCGM_EXP_GPU_HEALTHY{reason}``: one series per GPU, always (not selected by the CSV).

MIG attribution: NVML gives GPU-instance / compute-instance ids for an Xid inside a MIG instance;
``_target`` matches them with the MIG instances in the snapshot (``DeviceReading.mig``). Where the
snapshot has no matching instance (MIG not enabled, layout not read yet), the event counts on the
parent GPU, so nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import Metric

from exporter.health.clock_events import CLOCK_EVENT_REASONS, ClockEventTracker
from exporter.health.verdict import evaluate
from exporter.health.xid import XidLedger, XidSource, XidTally, XidView
from exporter.metrics.counters import CounterRow
from exporter.metrics.render import FamilyBuilder, RenderContext, owned_family
from exporter.snapshot import DeviceReading, MigReading
from exporter.xid_codes import xid_message

XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_TOTAL = "DCGM_EXP_XID_ERRORS_TOTAL"
CLOCK_EVENTS_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
CLOCK_EVENTS_TOTAL = "DCGM_EXP_CLOCK_EVENTS_TOTAL"
GPU_HEALTHY = "DCGM_EXP_GPU_HEALTHY"


def _rows(ctx: RenderContext, names: Iterable[str]) -> dict[str, CounterRow]:
    """The CSV rows (first one per catalog field) that select ``names``, keyed by catalog name."""
    wanted = set(names)
    rows: dict[str, CounterRow] = {}
    for row in ctx.counters.metrics:
        if row.spec.name in wanted and row.spec.name not in rows:
            rows[row.spec.name] = row
    return rows


def _family(row: CounterRow) -> Metric:
    return Metric(row.name, row.help, row.prom_type)


def _add(family: Metric, label_sets: Iterable[Mapping[str, str]], extra: Mapping[str, str], value: float) -> None:
    for labels in label_sets:
        family.add_sample(family.name, {**labels, **extra}, value)


@dataclass
class _Target:
    """A GPU or one of its MIG instances, with the Xid tallies attributed to it."""

    reading: DeviceReading
    mig: MigReading | None = None
    totals: dict[int, int] = field(default_factory=dict)
    in_window: dict[int, int] = field(default_factory=dict)
    last_xid: int = 0
    last_sequence: int = -1

    def add(self, tally: XidTally) -> None:
        for code, count in tally.totals.items():
            self.totals[code] = self.totals.get(code, 0) + count
        for code, count in tally.in_window.items():
            self.in_window[code] = self.in_window.get(code, 0) + count
        if tally.last_sequence > self.last_sequence:
            self.last_xid, self.last_sequence = tally.last_xid, tally.last_sequence

    def label_sets(self, ctx: RenderContext) -> list[dict[str, str]]:
        return ctx.series_label_sets(self.reading.identity, self.mig.identity if self.mig is not None else None)


def _target(reading: DeviceReading, source: XidSource) -> MigReading | None:
    """The MIG instance an Xid belongs to, or None for the whole GPU (the MIG attribution hook)."""
    if source.gpu_instance_id is None:
        return None
    candidates = [mig for mig in reading.mig if mig.identity.gpu_instance_id == source.gpu_instance_id]
    exact = [mig for mig in candidates if mig.identity.compute_instance_id == source.compute_instance_id]
    chosen = exact or candidates
    return chosen[0] if chosen else None


def _targets(ctx: RenderContext, view: XidView) -> list[_Target]:
    """Every GPU and MIG instance in the snapshot, with the tallies attributed to each."""
    targets: dict[tuple[str, str | None], _Target] = {}
    for reading in ctx.snapshot.devices:
        targets[(reading.identity.uuid, None)] = _Target(reading)
        for mig in reading.mig:
            targets[(reading.identity.uuid, mig.identity.uuid)] = _Target(reading, mig)
    for source, tally in view.tallies.items():
        parent = targets.get((source.gpu_uuid, None))
        if parent is None:
            continue  # a GPU that is no longer in the inventory
        instance = _target(parent.reading, source)
        targets[(source.gpu_uuid, instance.identity.uuid if instance is not None else None)].add(tally)
    return list(targets.values())


def xid_families(ledger: XidLedger, window_ms: int) -> FamilyBuilder:
    """The Xid rows the CSV selects: DCGM_FI_DEV_XID_ERRORS, DCGM_EXP_XID_ERRORS_COUNT / _TOTAL."""
    window_label = str(window_ms)

    def build(ctx: RenderContext) -> list[Metric]:
        rows = _rows(ctx, (XID_GAUGE, XID_COUNT, XID_TOTAL))
        if not rows:
            return []
        view = ledger.view()
        targets = _targets(ctx, view)
        families: list[Metric] = []
        if XID_GAUGE in rows:
            family = _family(rows[XID_GAUGE])
            for target in targets:
                last = view.last_xid(target.reading.identity.uuid) if target.mig is None else target.last_xid
                _add(family, target.label_sets(ctx), {"err_code": str(last), "err_msg": xid_message(last)}, last)
            families.append(family)
        if XID_COUNT in rows:
            family = _family(rows[XID_COUNT])
            for target in targets:
                label_sets = target.label_sets(ctx)
                if not target.in_window:
                    _add(family, label_sets, {"window_size_in_ms": window_label}, 0)
                for code in sorted(target.in_window):
                    _add(family, label_sets, {"window_size_in_ms": window_label, "xid": str(code)},
                         target.in_window[code])
            families.append(family)
        if XID_TOTAL in rows:
            family = _family(rows[XID_TOTAL])
            for target in targets:
                label_sets = target.label_sets(ctx)
                for code in sorted(target.totals):
                    _add(family, label_sets, {"xid": str(code)}, target.totals[code])
            families.append(family)
        return families

    return build


def clock_event_families(tracker: ClockEventTracker, window_ms: int) -> FamilyBuilder:
    """DCGM_EXP_CLOCK_EVENTS_COUNT / _TOTAL for the GPUs that report clock-event reasons."""
    window_label = str(window_ms)

    def build(ctx: RenderContext) -> list[Metric]:
        rows = _rows(ctx, (CLOCK_EVENTS_COUNT, CLOCK_EVENTS_TOTAL))
        if not rows:
            return []
        view = tracker.view()
        count = _family(rows[CLOCK_EVENTS_COUNT]) if CLOCK_EVENTS_COUNT in rows else None
        total = _family(rows[CLOCK_EVENTS_TOTAL]) if CLOCK_EVENTS_TOTAL in rows else None
        for reading in ctx.snapshot.devices:
            tallies = view.get(reading.identity.uuid)
            if not reading.up or tallies is None:
                continue
            label_sets = ctx.series_label_sets(reading.identity)
            for reason, _bit in CLOCK_EVENT_REASONS:
                tally = tallies[reason]
                if count is not None:
                    _add(count, label_sets, {"clock_event": reason, "window_size_in_ms": window_label},
                         tally.in_window)
                if total is not None:
                    _add(total, label_sets, {"clock_event": reason}, tally.total)
        return [family for family in (count, total) if family is not None]

    return build


def health_family(ledger: XidLedger) -> FamilyBuilder:
    """DCGM_EXP_GPU_HEALTHY: one series per GPU in the snapshot, lost GPUs included."""

    def build(ctx: RenderContext) -> list[Metric]:
        family = owned_family(GPU_HEALTHY)
        view = ledger.view()
        for reading in ctx.snapshot.devices:
            verdict = evaluate(reading, view.recent(reading.identity.uuid))
            _add(family, ctx.series_label_sets(reading.identity), {"reason": verdict.reason},
                 1 if verdict.healthy else 0)
        return [family]

    return build
