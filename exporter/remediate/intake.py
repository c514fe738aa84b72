"""Alerts in: what a webhook notification asks of which node, written into the ledger.

``receive()`` runs in the webhook's thread and only records what the notification says (it never
waits for the API server): a new firing occurrence (``fingerprint@startsAt``) of an allowlisted
alert becomes a *mark* for its GPU on its node and an alert-context Event; a resolution becomes a
*clear* due after the alert's hold (``untaint_after``; never, by default), and drops a change
still pending for it. An occurrence seen before (Alertmanager's repeats and retries, a replayed
webhook) changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from exporter.logs import StateLog, get_logger
from exporter.metrics.hostname_label import node_name
from exporter.remediate.alerts import Alert, Notification
from exporter.remediate.ledger import NODE_LEVEL, AlertContext, NodeLedger, PendingWork, gpu_label, mark_for
from exporter.remediate.nodestate import rfc3339
from exporter.remediate.policy import AlertPolicy, Policy
from exporter.remediate.selfmetrics import RemediationMetrics

log = get_logger("remediate")

NODE_ACTIONS = frozenset({"taint", "cordon", "annotate", "condition"})
SEEN_LIMIT = 100_000
SEEN_TTL = timedelta(days=7)


class Intake:
    def __init__(self, policy: Policy, ledger: NodeLedger, metrics: RemediationMetrics,
                 clock: Callable[[], datetime]) -> None:
        self.policy = policy
        self.ledger = ledger
        self.metrics = metrics
        self.clock = clock
        self._states = StateLog(log)

    def receive(self, notification: Notification) -> dict[str, int]:
        """Record a notification; returns counts by handling (new, repeat, ignored, unusable)."""
        counts = dict.fromkeys(("new", "repeat", "ignored", "unusable"), 0)
        now = self.clock()
        with self.ledger.lock:
            for alert in notification.alerts:
                handling = self._record(alert, now)
                counts[handling] += 1
                self.metrics.alerts.labels(alert.status, handling).inc()
            if notification.truncated_alerts:
                self._states.once(("truncated", notification.group_key), logging.WARNING,
                                  "Alertmanager truncated a notification: raise max_alerts on the receiver",
                                  group=notification.group_key, truncated=notification.truncated_alerts)
            self._prune_seen(now)
            self.ledger.lock.notify_all()
        return counts

    def node_name(self, labels: Mapping[str, str]) -> str:
        """The Kubernetes node an alert is about: the one place that reads the node label."""
        return node_name(labels, self.policy.node_label)  # Hostname or 4.8.3's hostname

    def _in_scope(self, alert: Alert) -> bool:
        """With ``cluster`` set, only alerts labelled with that cluster are ours (one Alertmanager, many clusters)."""
        if not self.policy.cluster or alert.labels.get("cluster") == self.policy.cluster:
            return True
        self._states.once(("other-cluster", alert.labels.get("cluster", "")), logging.INFO,
                          "alert from another cluster (or without a cluster label); ignored",
                          alert=alert.name, cluster=alert.labels.get("cluster", ""), ours=self.policy.cluster)
        return False

    def _record(self, alert: Alert, now: datetime) -> str:
        policy = self.policy.for_alert(alert.name)
        if policy is None or not self._in_scope(alert):
            return "ignored"
        node = self.node_name(alert.labels)
        if not node:
            self._states.once(("unusable", alert.name), logging.WARNING,
                              f"alert without the {self.policy.node_label} label: cannot tell which node "
                              "it is about; ignored", alert=alert.name)
            return "unusable"
        key = alert.occurrence + ("" if alert.firing else "/resolved")
        if key in self.ledger.seen:
            return "repeat"
        self.ledger.seen[key] = now
        # An alert without a UUID (NVSwitch, fabric manager, a GPU missing from the node's count) is about the
        # node as a whole: it is marked under NODE_LEVEL and leads to the same node-level actions.
        uuid = alert.labels.get("UUID", "") or NODE_LEVEL
        work = self.ledger.work.setdefault(node, PendingWork())
        if alert.firing:
            self._fire(node, uuid, alert, policy, work)
        else:
            self._resolve(node, uuid, alert, policy, work=work, now=now)
        if work.empty():
            self.ledger.work.pop(node, None)
        return "new"

    def _fire(self, node: str, uuid: str, alert: Alert, policy: AlertPolicy, work: PendingWork) -> None:
        self.ledger.firing.setdefault((node, uuid), {})[alert.fingerprint] = alert
        work.clears.get(uuid, {}).pop(alert.fingerprint, None)  # it fired again: no clearing
        if policy.actions & NODE_ACTIONS:
            previous = work.marks.get(uuid)
            alerts = {**(previous.alerts if previous else {}), alert.fingerprint: alert.name}
            work.marks[uuid] = mark_for(self.policy, uuid, gpu_label(alert, uuid), alerts,
                                        previous.since if previous else rfc3339(alert.starts_at))
        if policy.does("event") and self.policy.mode != "dry-run":
            self.ledger.contexts.append(AlertContext(node, uuid, alert))
        log.info("alert firing", extra={"fields": {
            "alert": alert.name, "node": node, "gpu": alert.labels.get("gpu"), "uuid": uuid,
            "xid": alert.labels.get("xid", ""), "fingerprint": alert.fingerprint}})

    def _resolve(self, node: str, uuid: str, alert: Alert, policy: AlertPolicy, *, work: PendingWork,
                 now: datetime) -> None:
        self.ledger.firing.setdefault((node, uuid), {}).pop(alert.fingerprint, None)
        self._drop_pending(node, uuid, work, alert)
        if policy.untaint_after_s is None:
            log.info("alert resolved; the GPU stays marked until a person clears it (untaint_after: never)",
                     extra={"fields": {"alert": alert.name, "node": node, "uuid": uuid}})
            return
        due = (alert.ends_at or now) + timedelta(seconds=policy.untaint_after_s)
        work.clears.setdefault(uuid, {})[alert.fingerprint] = due
        log.info("alert resolved; clearing after the hold", extra={"fields": {
            "alert": alert.name, "node": node, "uuid": uuid, "clear_at": rfc3339(due)}})

    def _drop_pending(self, node: str, uuid: str, work: PendingWork, alert: Alert) -> None:
        """The alert resolved before its change was made (held by a limit, or not yet due): drop the change.

        Without this a breaker would only delay a false alarm: the held taint would land once the window
        rolled, long after the alert that asked for it had gone (issue 29)."""
        pending = work.marks.get(uuid)
        if pending is None or alert.fingerprint not in pending.alerts:
            return
        remaining = {fp: name for fp, name in pending.alerts.items() if fp != alert.fingerprint}
        if remaining:
            work.marks[uuid] = mark_for(self.policy, uuid, pending.gpu, remaining, pending.since)
        else:
            del work.marks[uuid]
        self.ledger.dropped.append((node, alert, work.held))
        if not work.marks:
            work.held = ""
            work.retry_at = None

    def _prune_seen(self, now: datetime) -> None:
        seen = self.ledger.seen
        if len(seen) <= SEEN_LIMIT:
            return
        for key, moment in sorted(seen.items(), key=lambda item: item[1]):
            if len(seen) <= SEEN_LIMIT // 2 and now - moment < SEEN_TTL:
                break
            del seen[key]
