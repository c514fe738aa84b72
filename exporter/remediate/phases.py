"""The phase beyond "quarantined" (draining, drained, repair-requested, validating), written on the node.

``gpu-pod-exporter remediate status`` and a restarted remediator read it back from the annotation
``gpu-pod-exporter/remediation-phase`` (JSON ``{phase, why, since}``); only ``enforce`` writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from exporter.remediate.audit import Audit
from exporter.remediate.kubeapi import ApiError, KubeApi
from exporter.remediate.ledger import Episode
from exporter.remediate.nodestate import PHASE_ANNOTATION, rfc3339
from exporter.remediate.policy import Policy


class Phases:
    def __init__(self, policy: Policy, api: KubeApi, audit: Audit) -> None:
        self.policy = policy
        self.api = api
        self.audit = audit

    def write(self, node: str, phase: dict[str, str] | None) -> bool:
        """Record (None: remove) the phase on the node; False when it could not be written (tried again later)."""
        if not self.policy.changes_nodes:
            return True
        value = json.dumps(phase, sort_keys=True, separators=(",", ":")) if phase is not None else None
        try:
            self.api.patch_node(node, {"metadata": {"annotations": {PHASE_ANNOTATION: value}}})
        except ApiError as exc:
            self.audit.error("cannot record the remediation phase on the node", exc, node=node)
            return False
        return True

    def set(self, node: str, episode: Episode, phase: str, why: str, now: datetime) -> bool:
        """Enter ``phase`` (or say why anew) without an Event: for phases whose Events are elsewhere (draining)."""
        episode.phase = phase
        written = self.write(node, {"phase": phase, "why": why, "since": rfc3339(now)})
        episode.phase_written = episode.phase_written or (written and self.policy.changes_nodes)
        return written

    def enter(self, node: str, episode: Episode, phase: str, *, reason: str, why: str, now: datetime,
              fingerprints: Iterable[str], warning: bool = False) -> None:
        """Enter ``phase``: the annotation, one Event on the node and the transition log line."""
        self.set(node, episode, phase, why, now)
        self.audit.node(node, "", reason, why, now, fingerprints=fingerprints, state=phase,
                        identity=f"{phase}|{rfc3339(episode.since)}|{episode.attempt}", warning=warning)
