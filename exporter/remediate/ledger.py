"""The node ledger: everything the remediator knows about each node, in one place, behind one lock.

The remediator is four parts working over this one record (docs/remediation.md, "How it is built"):
the **intake** (``intake``) writes what alerts ask for; the **reconciler** (``reconciler``) turns
that into node marks; the **drain pass** (``drainpass``) and the **repair pass** (``repairpass``)
carry a quarantined node through the state machine. None of them keeps node state of its own, so
what one decided is what the next one reads, and the lock is the only synchronisation: the webhook
thread writes under it, the worker thread reads and writes under it, and no API call is made while
holding it.

Per node the ledger keeps the alerts firing on each GPU, the change pending (marks to merge, clears
due after their hold, the limit holding it), the marks that ``dry-run`` and ``events`` would have
made (``shadow``), the last transition, the drain and the episode (quarantine to re-admission).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from exporter.backoff import Backoff
from exporter.remediate.alerts import Alert
from exporter.remediate.devicetaints import DeviceRef
from exporter.remediate.nodestate import GpuMark, Marks
from exporter.remediate.policy import Policy

NODE_LEVEL = "node"  # the mark of an alert about the whole node (no UUID label)
EFFECT_ORDER = ("PreferNoSchedule", "NoSchedule", "NoExecute")


@dataclass(frozen=True)
class AlertContext:
    """An alert-context Event to record: the alert and the GPU it is about."""

    node: str
    uuid: str
    alert: Alert
    attempts: int = 0
    not_before: datetime | None = None

    def ready(self, now: datetime) -> bool:
        return self.not_before is None or self.not_before <= now


@dataclass
class PendingWork:
    """What is pending for one node."""

    marks: dict[str, GpuMark] = field(default_factory=dict)  # uuid -> mark to merge in
    clears: dict[str, dict[str, datetime]] = field(default_factory=dict)  # uuid -> fingerprint -> due
    retry_at: datetime | None = None  # not before (held or failed)
    held: str = ""  # the limit holding it, for one Event per episode

    def empty(self) -> bool:
        return not self.marks and not self.clears

    def next_due(self) -> datetime | None:
        """When this work can next make progress: marks at once, clears at their hold; never before retry_at."""
        times = [due for clears in self.clears.values() for due in clears.values()]
        if self.marks:
            times.append(datetime.min.replace(tzinfo=UTC))
        if not times:
            return None
        first = min(times)
        return max(first, self.retry_at) if self.retry_at is not None else first

    def due_clears(self, now: datetime) -> dict[str, set[str]]:
        """uuid -> the fingerprints whose hold has passed."""
        return {uuid: {fp for fp, when in clears.items() if when <= now} for uuid, clears in self.clears.items()}

    def settle(self, marks: Mapping[str, GpuMark], cleared: Mapping[str, set[str]]) -> None:
        """The marks and clears were made: forget them (unless a newer alert changed a mark meanwhile)."""
        for uuid, mark in marks.items():
            if self.marks.get(uuid) == mark:
                del self.marks[uuid]
        for uuid, fps in cleared.items():
            for fp in fps:
                self.clears.get(uuid, {}).pop(fp, None)
            if not self.clears.get(uuid, True):
                del self.clears[uuid]
        self.retry_at = None
        self.held = ""


@dataclass
class Drain:
    """A drain in progress on one quarantined node."""

    started: datetime
    uuids: set[str]
    fingerprints: set[str]
    backoff: dict[tuple[str, str], tuple[Backoff, datetime]] = field(default_factory=dict)
    refusals: dict[tuple[str, str], str] = field(default_factory=dict)  # pod -> why its eviction was refused
    reported: str = ""  # the plan last reported (dry-run and events: once per distinct plan)
    blockers: str = ""  # what kept it from being done, as last written on the node
    done: bool = False


@dataclass
class Episode:
    """One node's way from quarantined back to healthy (docs/remediation.md, "State machine")."""

    since: datetime
    phase: str = "quarantined"
    requested: bool = False
    job: str = ""  # the validation Job of this attempt
    attempt: int = 0
    validated: bool = False
    phase_written: bool = False


def mark_for(policy: Policy, uuid: str, gpu: str, alerts: Mapping[str, str], since: str, *,
             devices: tuple[DeviceRef, ...] = ()) -> GpuMark:
    """A GPU's mark from the alerts that hold it (fingerprint -> name) and what their policies ask; ``devices``:
    its DRA devices, once looked up (they stay with the mark)."""
    policies = [p for p in (policy.for_alert(name) for name in alerts.values()) if p is not None]
    effects = [p.taint_effect for p in policies if p.does("taint")]
    strongest = max(effects, key=EFFECT_ORDER.index) if effects else None
    return GpuMark(uuid=uuid, gpu=gpu, alerts=MappingProxyType(dict(alerts)), since=since, taint_effect=strongest,
                   cordon=any(p.does("cordon") for p in policies),
                   annotate=any(p.does("annotate") for p in policies),
                   condition=any(p.does("condition") for p in policies), devices=devices)


def fingerprints(*states: Marks) -> list[str]:
    """The fingerprints of the alerts behind these marks, for the audit line."""
    return sorted({fp for marks in states for mark in marks.gpus.values() for fp in mark.alerts})


def gpu_label(alert: Alert, uuid: str) -> str:
    return NODE_LEVEL if uuid == NODE_LEVEL else alert.labels.get("gpu", "")


def named_pods(alerts: Iterable[Alert]) -> set[tuple[str, str]]:
    """(namespace, pod) of every alert that names its pod (the exporter's attribution labels)."""
    return {(a.labels["namespace"], a.labels["pod"]) for a in alerts
            if a.labels.get("pod") and a.labels.get("namespace")}


class NodeLedger:
    """See the module docstring. ``lock`` guards every field; take it for each read-modify-write."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.seen: dict[str, datetime] = {}  # alert occurrences already handled
        self.firing: dict[tuple[str, str], dict[str, Alert]] = {}  # (node, uuid) -> fingerprint -> alert
        self.contexts: list[AlertContext] = []
        self.work: dict[str, PendingWork] = {}
        self.shadow: dict[str, Marks] = {}  # dry-run / events: the marks enforce mode would have made
        self.transitions: dict[str, datetime] = {}
        self.marked: set[str] = set()
        self.dropped: list[tuple[str, Alert, str]] = []  # (node, resolved alert, the limit that held it)
        self.drains: dict[str, Drain] = {}
        self.episodes: dict[str, Episode] = {}
        self.uids: dict[str, str] = {}  # node name -> uid, for Events recorded away from the node object

    # -- queries (each takes the lock) ---------------------------------------------------------------

    def due_nodes(self, now: datetime) -> list[str]:
        """Nodes with work due now, clears first (they make room under the limits)."""
        with self.lock:
            due = [node for node, work in self.work.items() if (when := work.next_due()) is not None and when <= now]
            return sorted(due, key=lambda node: bool(self.work[node].marks))

    def has_due_work(self, now: datetime) -> bool:
        with self.lock:
            return any(c.ready(now) for c in self.contexts) or bool(self.due_nodes(now))

    def next_due(self, now: datetime) -> datetime | None:
        with self.lock:
            times = [when for work in self.work.values() if (when := work.next_due()) is not None]
            times += [c.not_before or now for c in self.contexts]
        return min(times) if times else None

    def take_contexts(self, now: datetime) -> list[AlertContext]:
        with self.lock:
            ready = [c for c in self.contexts if c.ready(now)]
            self.contexts = [c for c in self.contexts if not c.ready(now)]
        return ready

    def take_dropped(self) -> list[tuple[str, Alert, str]]:
        with self.lock:
            dropped, self.dropped = self.dropped, []
        return dropped

    def alerts_on(self, node: str, uuid: str) -> list[Alert]:
        with self.lock:
            return list(self.firing.get((node, uuid), {}).values())

    def node_alerts(self, node: str) -> tuple[dict[str, str], list[Alert]]:
        """(UUID -> GPU index, the alerts) of what is firing on ``node``."""
        gpus: dict[str, str] = {}
        alerts: list[Alert] = []
        with self.lock:
            for (name, uuid), firing in self.firing.items():
                if name == node and firing:
                    alerts.extend(firing.values())
                    gpus[uuid] = gpu_label(next(iter(firing.values())), uuid)
        return gpus, alerts

    def held_limits(self) -> list[str]:
        with self.lock:
            return [work.held for work in self.work.values() if work.held]

    def drained(self, node: str) -> bool:
        with self.lock:
            drain = self.drains.get(node)
            return drain is not None and drain.done

    def restricted_shadow(self) -> set[str]:
        """Nodes that dry-run and events would have restricted."""
        with self.lock:
            return {name for name, marks in self.shadow.items() if marks.restricts}

    def marked_nodes(self, changes_nodes: bool) -> set[str]:
        with self.lock:
            return set(self.marked) if changes_nodes else {name for name, marks in self.shadow.items() if marks.gpus}

    def reschedule(self, node: str, retry_at: datetime) -> None:
        with self.lock:
            work = self.work.get(node)
            if work is not None:
                work.retry_at = retry_at
