"""The alert-context Events (on the node and on every pod of the GPU) and the "dropped" Events.

Both are about a node an alert named. A node the API server does not know (a typo in a label, a
node already deleted, an alert from another cluster without a ``cluster`` label) gets nothing: an
Event about it would be a write about an object that does not exist, so the alert is logged once
and left alone (issue 41).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from exporter.logs import get_logger
from exporter.remediate import events as ev
from exporter.remediate.alerts import Alert
from exporter.remediate.audit import Audit
from exporter.remediate.kubeapi import ApiError, KubeApi
from exporter.remediate.ledger import AlertContext, NodeLedger, named_pods

log = get_logger("remediate")

EVENT_ATTEMPTS = 3
RETRY_AFTER_FAILURE = timedelta(seconds=30)
NO_SUCH_NODE: list[dict[str, Any]] = []  # the listing of a node that does not exist (compared by identity)


def _target(alert: Alert) -> str:
    uuid = alert.labels.get("UUID", "")
    return f"GPU {alert.labels.get('gpu', '?')} ({uuid})" if uuid else "the node"


class AlertEvents:
    def __init__(self, api: KubeApi, ledger: NodeLedger, audit: Audit, clock: Callable[[], datetime]) -> None:
        self.api = api
        self.ledger = ledger
        self.audit = audit
        self.clock = clock

    def node_exists(self, node: str) -> bool | None:
        """Is there such a node? None: the API server could not say (try again later)."""
        with self.ledger.lock:
            if node in self.ledger.uids:
                return True
        try:
            obj = self.api.get_node(node)
        except ApiError as exc:
            if exc.status == 404:
                self.audit.states.once(("no-such-node", node), logging.WARNING,
                                       "an alert names a node the API server does not know; nothing is written "
                                       "about it", node=node)
                return False
            self.audit.error("cannot read a node an alert names; its Events wait", exc, node=node)
            return None
        with self.ledger.lock:
            self.ledger.uids[node] = obj.get("metadata", {}).get("uid", "")
        return True

    def record_contexts(self) -> None:
        now = self.clock()
        pods_by_node: dict[str, list[dict[str, Any]] | None] = {}
        for context in self.ledger.take_contexts(now):
            if context.node not in pods_by_node:
                pods_by_node[context.node] = self._listing(context.node)
            listing = pods_by_node[context.node]
            if listing is None:
                self._retry(context)
            elif listing is not NO_SUCH_NODE:  # a node the API server does not know: no Event at all
                self._record(context, listing, now)

    def _record(self, context: AlertContext, listing: list[dict[str, Any]], now: datetime) -> None:
        try:
            self._post(context, listing, now)
            self.audit.ok()
        except ApiError as exc:
            self.audit.error("cannot record an alert Event", exc, node=context.node)
            self._retry(context)

    def _listing(self, node: str) -> list[dict[str, Any]] | None:
        """The node's pods; ``NO_SUCH_NODE`` when there is no such node; None when they cannot be listed now."""
        exists = self.node_exists(node)
        if not exists:
            return None if exists is None else NO_SUCH_NODE
        try:
            return self.api.list_pods_on_node(node)
        except ApiError as exc:
            self.audit.error("cannot list the pods of a node; alert Events wait", exc, node=node)
            return None

    def record_dropped(self) -> None:
        """One Event and log line per change dropped because its alert resolved before it was made."""
        now = self.clock()
        for node, alert, held in self.ledger.take_dropped():
            why = f" while held by {held}" if held else " before it was made"
            message = (f"Dropped: {alert.name} for {_target(alert)} resolved{why}; "
                       "the node is not changed for it.")
            self.audit.metrics.count("taint", "dropped")
            if not self.node_exists(node):
                continue
            try:
                self.audit.node(node, "", ev.REASON_DROPPED, message, now, fingerprints=[alert.fingerprint],
                                state="healthy", identity=f"dropped|{alert.occurrence}", warning=False)
            except ApiError as exc:
                self.audit.error("cannot record an Event", exc, node=node)

    def _retry(self, context: AlertContext) -> None:
        if context.attempts + 1 >= EVENT_ATTEMPTS:
            self.audit.metrics.count("event", "failed")
            log.error("alert Event dropped after repeated failures", extra={"fields": {
                "node": context.node, "alert": context.alert.name}})
            return
        with self.ledger.lock:
            self.ledger.contexts.append(replace(context, attempts=context.attempts + 1,
                                                not_before=self.clock() + RETRY_AFTER_FAILURE))

    def _pods_on_gpu(self, node: str, uuid: str, listing: Iterable[Mapping[str, Any]]) -> list[ev.PodRef]:
        named = named_pods(self.ledger.alerts_on(node, uuid))
        uids = {(p.get("metadata", {}).get("namespace", ""), p.get("metadata", {}).get("name", "")):
                p.get("metadata", {}).get("uid", "") for p in listing}
        return [ev.PodRef(namespace, name, uids.get((namespace, name), "")) for namespace, name in sorted(named)]

    def _post(self, context: AlertContext, listing: list[dict[str, Any]], now: datetime) -> None:
        alert = context.alert
        pods = self._pods_on_gpu(context.node, context.uuid, listing)
        if alert.labels.get("pod") and alert.labels.get("namespace"):
            own = ev.PodRef(alert.labels["namespace"], alert.labels["pod"])
            if own not in {ev.PodRef(p.namespace, p.name) for p in pods}:
                pods.append(own)
        message = ev.alert_context(alert.labels, alert.annotations, pods, node=context.node)
        with self.ledger.lock:
            uid = self.ledger.uids.get(context.node, "")
        self.audit.post(*ev.node_event(context.node, uid, alert.name, message, now, identity=alert.occurrence,
                                       instance=self.audit.instance))
        for pod in pods:
            if not pod.uid:
                continue  # not (or no longer) on this node: nothing to attach the Event to
            text = f"The GPU this pod uses is unhealthy. {message}"
            self.audit.pod(pod, alert.name, text, now, identity=alert.occurrence)
