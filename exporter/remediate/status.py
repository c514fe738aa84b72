"""``gpu-pod-exporter remediate status``: every node the remediator touched, its state and why.

Read from the nodes themselves (what the remediator wrote there: its state and phase annotations,
its taint; a GPU quarantined by a DeviceTaintRule is named with its device), so the answer is the
same whichever replica asks and survives restarts; no state of a running remediator is needed.
States (docs/remediation.md, "State machine"): ``quarantined``, ``draining`` (with what blocks the
drain: the PodDisruptionBudget refusing an eviction, by name; a pod allowed to complete; pods it
cannot place on a GPU), ``drained``, ``repair-requested``, ``validating`` (from the phase
annotation), ``marked`` (GPUs annotated, no taint or cordon asked for) and ``healthy again`` (its
marks are gone; the last transition is kept for the cooldown).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.remediate.nodestate import (
    PHASE_ANNOTATION,
    STATE_ANNOTATION,
    GpuMark,
    read_marks,
    restricted_by_us,
    rfc3339,
)


@dataclass(frozen=True)
class NodeStatus:
    node: str
    state: str
    since: str
    why: str


def node_status(node: Mapping[str, Any]) -> NodeStatus | None:
    """The remediation state of one node; None for a node the remediator never touched."""
    metadata = node.get("metadata", {})
    annotations = metadata.get("annotations") or {}
    if STATE_ANNOTATION not in annotations and PHASE_ANNOTATION not in annotations:
        return None
    marks = read_marks(node)
    gpus = "; ".join(f"GPU {mark.gpu} ({uuid}): {', '.join(sorted(set(mark.alerts.values())))} since {mark.since}"
                     + _device_rule(mark) for uuid, mark in sorted(marks.gpus.items()))
    since = rfc3339(marks.last_transition) if marks.last_transition else ""
    phase = _phase(annotations.get(PHASE_ANNOTATION))
    if phase is not None:
        return NodeStatus(metadata.get("name", ""), phase.get("phase", "?"), phase.get("since", since),
                          phase.get("why", "") + (f" [{gpus}]" if gpus else ""))
    if restricted_by_us(node):
        return NodeStatus(metadata.get("name", ""), "quarantined", since, gpus or "tainted or cordoned by us")
    if marks.gpus:
        return NodeStatus(metadata.get("name", ""), "marked", since, gpus)
    return NodeStatus(metadata.get("name", ""), "healthy again", since, "no GPU marked; last change at " +
                      (since or "an unknown time"))


def _device_rule(mark: GpuMark) -> str:
    if not (mark.devices and mark.taint_effect):
        return ""
    return f", quarantined alone by DeviceTaintRule ({', '.join('/'.join(d.to_json()) for d in mark.devices)})"


def _phase(raw: object) -> dict[str, str] | None:
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else None


def render(nodes: Iterable[Mapping[str, Any]]) -> str:
    """A table, one line per touched node, sorted by name."""
    rows = sorted((s for s in map(node_status, nodes) if s is not None), key=lambda s: s.node)
    if not rows:
        return "no node carries a mark of gpu-pod-exporter remediate"
    width = max(len("NODE"), *(len(r.node) for r in rows))
    state_width = max(len("STATE"), *(len(r.state) for r in rows))
    lines = [f"{'NODE':<{width}}  {'STATE':<{state_width}}  {'SINCE':<20}  WHY"]
    lines += [f"{r.node:<{width}}  {r.state:<{state_width}}  {r.since or '-':<20}  {r.why}" for r in rows]
    return "\n".join(lines)
