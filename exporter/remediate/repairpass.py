"""The repair pass: hand a quarantined (and drained) node to repair, and gate its re-admission.

The objects are ``repair`` (pure): one ``GpuRepairRequest`` per node and episode, created once the
node is quarantined and, with ``drain``, drained; in ``dry-run`` and ``events`` the request it
would create is reported once the drain plan has been (so the whole plan is told). With
``validation``, re-admission (lifting our marks) waits for a Job of the user's image to succeed
on the node; a failed Job sends the node back to ``repair-requested``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime

from exporter.remediate import events as ev
from exporter.remediate import repair
from exporter.remediate.alerts import Alert
from exporter.remediate.audit import Audit
from exporter.remediate.kubeapi import ApiConflictError, ApiError, KubeApi
from exporter.remediate.ledger import Episode, NodeLedger, fingerprints
from exporter.remediate.nodestate import Marks
from exporter.remediate.phases import Phases
from exporter.remediate.policy import Policy


class RepairPass:
    def __init__(self, policy: Policy, api: KubeApi, ledger: NodeLedger, audit: Audit, *, phases: Phases,
                 clock: Callable[[], datetime]) -> None:
        self.policy = policy
        self.api = api
        self.ledger = ledger
        self.audit = audit
        self.phases = phases
        self.clock = clock

    def _ready(self, node: str, episode: Episode) -> bool:
        """Not handed over yet, and drained (enforce) or its drain plan reported (dry-run, events)."""
        if episode.requested:
            return False
        if self.policy.drain is None:
            return True
        drain = self.ledger.drains.get(node)
        return drain is not None and (drain.done or (not self.policy.changes_nodes and bool(drain.reported)))

    def run(self) -> None:
        """Quarantined (and drained, when draining): hand the node to repair with a GpuRepairRequest."""
        if not self.policy.repair_request:
            return
        with self.ledger.lock:
            waiting = [(node, ep) for node, ep in self.ledger.episodes.items() if self._ready(node, ep)]
        for node, episode in waiting:
            gpus, alerts = self.ledger.node_alerts(node)
            body = repair.repair_request(node, episode.since, gpus, alerts)
            if not self.policy.changes_nodes:
                self._report(node, episode, body, gpus, alerts)
            else:
                self._request(node, episode, body, gpus, alerts)

    def _report(self, node: str, episode: Episode, body: repair.JsonObject, gpus: dict[str, str],
                alerts: list[Alert]) -> None:
        episode.requested = True
        self.audit.node(node, "", ev.REASON_DRY_RUN, f"Mode {self.policy.mode}: would create {repair.KIND} "
                        f"{body['metadata']['name']} for {_gpus(gpus)} (evidence: {_names(alerts)}).",
                        self.clock(), fingerprints=[a.fingerprint for a in alerts], state="repair-requested",
                        identity=f"repair|{body['metadata']['name']}", warning=False)

    def _request(self, node: str, episode: Episode, body: repair.JsonObject, gpus: dict[str, str],
                 alerts: list[Alert]) -> None:
        try:
            self.api.create_repair_request(body)
        except ApiConflictError:
            pass  # created before (a restart): the hand-off stands
        except ApiError as exc:
            self.audit.error("cannot create the repair request; will try again", exc, node=node)
            return
        episode.requested = True
        self.phases.enter(node, episode, "repair-requested", reason=ev.REASON_REPAIR_REQUESTED, now=self.clock(),
                          fingerprints=[a.fingerprint for a in alerts],
                          why=f"Handed to repair: {repair.KIND} {body['metadata']['name']} ({_gpus(gpus)}; "
                          f"evidence: {_names(alerts)}).")

    # -- re-admission -------------------------------------------------------------------------------

    def validated(self, node: str, current: Marks, now: datetime) -> bool:
        """Re-admission gate: with ``validation`` set, the validation Job must have succeeded on the node."""
        validation = self.policy.validation
        if validation is None or not self.policy.changes_nodes:
            return True
        with self.ledger.lock:
            episode = self.ledger.episodes.setdefault(node, Episode(since=current.last_transition or now))
        if episode.validated:
            return True
        if not episode.job:
            self._start_job(node, episode, current, now)
            return False
        outcome = repair.job_outcome(self.api.get_job(validation.namespace, episode.job))
        if outcome == "succeeded":
            episode.validated = True
            self.audit.node(node, "", ev.REASON_VALIDATED, f"Validation Job {validation.namespace}/{episode.job} "
                            "succeeded: re-admitting the node.", now, fingerprints=fingerprints(current),
                            state="validating", identity=f"validated|{episode.job}", warning=False)
            return True
        if outcome == "failed":
            self._job_failed(node, episode, current, now)
        return False

    def _start_job(self, node: str, episode: Episode, current: Marks, now: datetime) -> None:
        validation = self.policy.validation
        assert validation is not None
        episode.attempt += 1
        body = repair.validation_job(node, episode.since, validation)
        body["metadata"]["name"] = f"{body['metadata']['name'][:58]}-{episode.attempt}"
        with contextlib.suppress(ApiConflictError):
            self.api.create_job(validation.namespace, body)
        episode.job = body["metadata"]["name"]
        self.phases.enter(node, episode, "validating", reason=ev.REASON_VALIDATING, now=now,
                          fingerprints=fingerprints(current),
                          why=f"The alerts resolved and the hold passed; validating before re-admission: Job "
                          f"{validation.namespace}/{episode.job} ({validation.image}) on the node.")

    def _job_failed(self, node: str, episode: Episode, current: Marks, now: datetime) -> None:
        validation = self.policy.validation
        assert validation is not None
        job, episode.job = episode.job, ""
        with self.ledger.lock:
            work = self.ledger.work.get(node)
            if work is not None:
                work.clears.clear()  # stays out until its alerts resolve again (or a person clears it)
                if work.empty():
                    del self.ledger.work[node]
        self.phases.enter(node, episode, "repair-requested", reason=ev.REASON_VALIDATION_FAILED, now=now,
                          fingerprints=fingerprints(current), warning=True,
                          why=f"Validation Job {validation.namespace}/{job} failed: the node stays quarantined; "
                          "repair it, then resolve or clear its alerts to validate again.")


def _gpus(gpus: dict[str, str]) -> str:
    listed = ", ".join(f"{index} ({uuid})" for uuid, index in sorted(gpus.items()))
    return f"GPUs {listed}" if listed else "no GPU"


def _names(alerts: list[Alert]) -> str:
    return ", ".join(sorted({a.name for a in alerts})) or "none"
