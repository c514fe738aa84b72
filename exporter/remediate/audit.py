"""How the remediator tells people what it did: Events, the ``remediation transition`` log line, API health.

Every part (reconciler, drain, repair) reports through one ``Audit``, so that each transition is one
Event on the node and one structured log line naming the alert fingerprints (docs/remediation.md,
"State machine"), an Event recorded before (a replay after a restart: 409) counts as unchanged, and
"the API works again" is said once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from exporter.logs import StateLog, get_logger
from exporter.remediate import events as ev
from exporter.remediate.kubeapi import ApiConflictError, ApiError, KubeApi
from exporter.remediate.ledger import NodeLedger
from exporter.remediate.selfmetrics import RemediationMetrics

log = get_logger("remediate")


class Audit:
    def __init__(self, api: KubeApi, metrics: RemediationMetrics, ledger: NodeLedger, *, instance: str) -> None:
        self.api = api
        self.metrics = metrics
        self.ledger = ledger
        self.instance = instance
        self.states = StateLog(log)
        self.last_error = ""

    def post(self, namespace: str, event: dict[str, Any]) -> None:
        try:
            self.api.create_event(namespace, event)
        except ApiConflictError:
            self.metrics.count("event", "unchanged")  # recorded before (a replay after a restart)
            return
        self.metrics.count("event", "applied")
        log.info("event recorded", extra={"fields": {
            "object": f"{event['involvedObject']['kind']}/{event['involvedObject']['name']}",
            "reason": event["reason"]}})

    def node(self, node: str, uid: str, reason: str, message: str, now: datetime, *, fingerprints: Iterable[str],
             state: str, identity: str, warning: bool = True) -> None:
        """Every transition: one Event on the node and one structured log line naming the alert fingerprints."""
        prints = sorted(set(fingerprints))
        with self.ledger.lock:
            uid = uid or self.ledger.uids.get(node, "")  # kubectl describe finds a node's Events by its uid
        log.log(logging.WARNING if warning else logging.INFO, "remediation transition", extra={"fields": {
            "node": node, "event": reason, "state": state, "fingerprints": ",".join(prints), "why": message}})
        self.post(*ev.node_event(node, uid, reason, message, now, identity=identity, warning=warning,
                                 instance=self.instance))

    def pod(self, pod: ev.PodRef, reason: str, message: str, now: datetime, *, identity: str) -> None:
        self.post(*ev.pod_event(pod, reason, message, now, identity=identity, instance=self.instance))

    def ok(self) -> None:
        """An API call worked: if the last one had failed, say once that it works again."""
        if self.last_error:
            self.last_error = ""
            self.states.change("api", "ok", logging.INFO, "Kubernetes API calls work again")

    def error(self, message: str, exc: ApiError, **fields: Any) -> None:
        self.last_error = f"{message}: {exc}"
        self.states.change("api", str(exc.status), logging.ERROR, message, error=str(exc), **fields)
