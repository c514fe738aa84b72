"""Before the first node change: learn from the nodes what earlier runs did.

A restarted remediator (or a new replica) must decide as the old one would have: the recent
transitions feed the cooldown and the hourly limit, the marked nodes the metrics, and a node in an
episode carries on from its phase annotation (no second repair request; the drain resumed, since
evictions are idempotent, unless the node was drained already). All of it is on the nodes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from exporter.remediate.audit import Audit
from exporter.remediate.breaker import Breaker
from exporter.remediate.kubeapi import ApiError, KubeApi
from exporter.remediate.ledger import Drain, Episode, NodeLedger, fingerprints
from exporter.remediate.nodestate import PHASE_ANNOTATION, Marks, read_marks, restricted_by_us
from exporter.remediate.policy import Policy

HANDED_OVER = ("repair-requested", "validating")
DRAINED = ("drained", *HANDED_OVER)


def load(policy: Policy, api: KubeApi, ledger: NodeLedger, audit: Audit, *, breaker: Breaker, now: datetime) -> bool:
    """Learn every node's earlier remediation into the ledger and the breaker; False when the nodes could not
    be listed (node changes wait)."""
    try:
        nodes = api.list_nodes()
    except ApiError as exc:
        audit.error("cannot list nodes to learn earlier remediations; node changes wait", exc)
        return False
    for node in nodes:
        marks = read_marks(node)
        _learn(policy, ledger, node, marks)
        name = node.get("metadata", {}).get("name", "")
        if marks.last_transition is not None and now - marks.last_transition < timedelta(hours=1):
            breaker.record(name, marks.last_transition)
        if policy.changes_nodes and restricted_by_us(node):
            _resume(policy, ledger, node, marks, now)
    audit.states.change("api", "ok", logging.INFO, "Kubernetes API reachable; earlier remediations loaded",
                        nodes=len(nodes), marked=len(ledger.marked))
    return True


def _learn(policy: Policy, ledger: NodeLedger, node: Mapping[str, Any], marks: Marks) -> None:
    name = node.get("metadata", {}).get("name", "")
    with ledger.lock:
        ledger.uids[name] = node.get("metadata", {}).get("uid", "")
        if marks.last_transition is not None:
            ledger.transitions[name] = marks.last_transition
        if marks.gpus and policy.changes_nodes:
            ledger.marked.add(name)


def _resume(policy: Policy, ledger: NodeLedger, node: Mapping[str, Any], marks: Marks, now: datetime) -> None:
    """Carry on the node's episode from its phase annotation."""
    raw = (node.get("metadata", {}).get("annotations") or {}).get(PHASE_ANNOTATION)
    try:
        phase = str(json.loads(raw).get("phase", "")) if raw else ""
    except (json.JSONDecodeError, AttributeError):
        phase = ""
    since = marks.last_transition or now
    name = node.get("metadata", {}).get("name", "")
    with ledger.lock:
        ledger.episodes[name] = Episode(since=since, phase=phase or "quarantined", requested=phase in HANDED_OVER,
                                        phase_written=bool(raw))
        if policy.drain is not None:
            ledger.drains[name] = Drain(started=since, uuids=set(marks.gpus), fingerprints=set(fingerprints(marks)),
                                        done=phase in DRAINED)
