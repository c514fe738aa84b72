"""The remediator: alerts in, node changes and Events out, one node at a time, within the limits.

``Remediator`` only composes the parts, all over one ``NodeLedger`` (docs/remediation.md, "How it
is built"):

* ``Intake`` (``receive()``, the webhook's thread): what the alerts ask, written into the ledger;
* ``AlertEvents``: the alert-context Events on the node and the GPU's pods, and "dropped" Events;
* ``Reconciler``: per node with due work, our marks (taint, cordon, annotation, condition) made
  what the alerts ask, within the ``Breaker``'s limits;
* ``DrainPass`` and ``RepairPass``: a quarantined node drained, handed to repair, validated;
* ``Audit``: every Event and transition log line, and whether the API server answers;
* ``resume.load``: before the first change, what earlier runs did, learned from the nodes.

A single worker thread (``run_once`` per pass) does the API work in that order. Failures of the
API server are retried with backoff (``kubeapi``), then the work stays pending and a later pass
tries again; nothing is dropped except Events that keep failing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from exporter.logs import get_logger
from exporter.remediate import resume
from exporter.remediate.alertevents import AlertEvents
from exporter.remediate.alerts import Notification
from exporter.remediate.audit import Audit
from exporter.remediate.breaker import Breaker
from exporter.remediate.devicerules import DeviceRuleWriter
from exporter.remediate.drainpass import DrainPass
from exporter.remediate.intake import Intake
from exporter.remediate.kubeapi import KubeApi
from exporter.remediate.ledger import NodeLedger
from exporter.remediate.phases import Phases
from exporter.remediate.policy import Policy
from exporter.remediate.reconciler import Reconciler
from exporter.remediate.repairpass import RepairPass
from exporter.remediate.selfmetrics import RemediationMetrics

log = get_logger("remediate")

Clock = Callable[[], datetime]
LIMITS = ("cooldown", "max_nodes_per_hour", "max_tainted_percent")


def utc_now() -> datetime:
    return datetime.now(UTC)


class Remediator:
    def __init__(self, policy: Policy, api: KubeApi, metrics: RemediationMetrics, *, clock: Clock = utc_now,
                 recheck_s: float = 15.0, instance: str = "") -> None:
        self.policy = policy
        self.api = api
        self.metrics = metrics
        self.clock = clock
        self.recheck = timedelta(seconds=recheck_s)
        self.breaker = Breaker(policy.limits)
        self.ledger = NodeLedger()
        self.audit = Audit(api, metrics, self.ledger, instance=instance)
        self.intake = Intake(policy, self.ledger, metrics, clock)
        self.alert_events = AlertEvents(api, self.ledger, self.audit, clock)
        rules = DeviceRuleWriter(policy, api, self.ledger, self.audit)
        phases = Phases(policy, api, self.audit)
        self.drain = DrainPass(policy, api, self.ledger, self.audit, phases=phases, rules=rules, clock=clock,
                               stop=api.stop)
        self.repair = RepairPass(policy, api, self.ledger, self.audit, phases=phases, clock=clock)
        self.reconciler = Reconciler(policy, api, self.ledger, self.audit, breaker=self.breaker, rules=rules,
                                     drain=self.drain, repair=self.repair, clock=clock, recheck=self.recheck)
        self._stop = api.stop
        self._thread: threading.Thread | None = None

    @property
    def last_error(self) -> str:
        return self.audit.last_error

    # -- webhook side ------------------------------------------------------------------------------

    def receive(self, notification: Notification) -> dict[str, int]:
        """Record a notification; returns counts by handling (new, repeat, ignored, unusable)."""
        return self.intake.receive(notification)

    def node_name(self, labels: Mapping[str, str]) -> str:
        return self.intake.node_name(labels)

    def close_breaker(self, who: str = "") -> bool:
        """A person closes the latched breaker; held changes whose alerts still fire are decided again at once."""
        with self.ledger.lock:
            was_open = self.breaker.close()
            if was_open:
                for work in self.ledger.work.values():
                    if work.held == "max_nodes_per_hour":
                        work.retry_at = None
                        work.held = ""
                self.ledger.lock.notify_all()
        if was_open:
            log.warning("circuit breaker closed by a person", extra={"fields": {"by": who or "unknown"}})
        return was_open

    # -- worker side --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="remediate", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self.ledger.lock:
            self.ledger.lock.notify_all()
        if self._thread is not None:
            self._thread.join(10)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.run_once()
            except Exception:
                log.exception("remediation pass failed; trying again")
                wait = self.recheck.total_seconds()
            with self.ledger.lock:
                if not self._stop.is_set() and not self.ledger.has_due_work(self.clock()):
                    self.ledger.lock.wait(timeout=wait)

    def run_once(self) -> float:
        """One pass over everything due; returns seconds until something else is due (at most recheck)."""
        if not self.reconciler.synced:
            self.reconciler.synced = resume.load(self.policy, self.api, self.ledger, self.audit,
                                                 breaker=self.breaker, now=self.clock())
        self.alert_events.record_contexts()
        self.alert_events.record_dropped()
        for node in self.ledger.due_nodes(self.clock()):
            if self._stop.is_set():
                break
            self.alert_events.record_contexts()  # alerts that arrived meanwhile are explained before nodes change
            self.reconciler.reconcile(node)
        self.drain.run()
        self.repair.run()
        self._publish()
        horizon = self.recheck.total_seconds()
        due = self.ledger.next_due(self.clock())
        if due is not None:
            horizon = min(horizon, max(0.05, (due - self.clock()).total_seconds()))
        return horizon

    def _publish(self) -> None:
        held = self.ledger.held_limits()
        for limit in LIMITS:
            self.metrics.held.labels(limit).set(held.count(limit))
        self.metrics.breaker_open.set(1 if self.breaker.is_open or any(limit != "cooldown" for limit in held) else 0)
        self.metrics.marked_nodes.set(len(self.ledger.marked_nodes(self.policy.changes_nodes)))

    def health(self) -> tuple[bool, str]:
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return False, "the remediation worker stopped"
        with self.ledger.lock:
            pending = len(self.ledger.work)
        state = "synced" if self.reconciler.synced else "waiting for the Kubernetes API"
        return True, f"ok: mode {self.policy.mode}, {state}, {pending} nodes with pending changes"
