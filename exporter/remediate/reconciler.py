"""The reconciler: make one node's marks what its alerts ask, within the limits.

Per node with due work: read the node, merge the pending marks and the due clears into our marks
on it (``nodestate``), and, when that starts or ends a taint or cordon (a *transition*), ask the
``Breaker`` (and, to lift the marks, the repair pass's validation gate); a held change stays
pending (one Event says why) and is tried again later. ``enforce`` patches the node (with its
resourceVersion; a 409 means read again and decide again) and its condition, then records a
decision Event; ``dry-run`` and ``events`` make the same decisions against the ledger's shadow
marks (so the breaker behaves exactly as it would) and report them in a ``GpuRemediationDryRun``
Event. A node the API server does not know (404) is dropped with its pending work.

``sync()`` first learns from the nodes what earlier runs did (recent transitions for the limits,
episodes to carry on), so a restarted remediator decides as the old one would have.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from exporter.remediate import changes, nodestate
from exporter.remediate import events as ev
from exporter.remediate.audit import Audit, log
from exporter.remediate.breaker import Breaker, Verdict
from exporter.remediate.devicerules import DeviceRuleWriter
from exporter.remediate.drainpass import DrainPass
from exporter.remediate.kubeapi import ApiConflictError, ApiError, KubeApi
from exporter.remediate.ledger import Drain, Episode, NodeLedger, fingerprints, mark_for
from exporter.remediate.nodestate import PHASE_ANNOTATION, GpuMark, Marks, read_marks, restricted_by_us, rfc3339
from exporter.remediate.policy import Policy
from exporter.remediate.repairpass import RepairPass

CONFLICT_RETRIES = 5
RETRY_AFTER_FAILURE = timedelta(seconds=30)
LATCHED = timedelta(days=3650)
HANDED_OVER = ("repair-requested", "validating")
DRAINED = ("drained", *HANDED_OVER)


def _state(marks: Marks) -> str:
    return "quarantined" if marks.gpus or marks.restricts else "healthy"


@dataclass(frozen=True)
class _Decision:
    """One node, read: what is on it, what it should carry, and what was pending for it."""

    obj: Mapping[str, Any]
    current: Marks
    desired: Marks
    marks: Mapping[str, GpuMark]  # the pending marks this decision merges
    due: Mapping[str, set[str]]  # the clears whose hold passed
    transition: bool


class Reconciler:
    def __init__(self, policy: Policy, api: KubeApi, ledger: NodeLedger, audit: Audit, *, breaker: Breaker,
                 rules: DeviceRuleWriter, drain: DrainPass, repair: RepairPass, clock: Callable[[], datetime],
                 recheck: timedelta) -> None:
        self.policy = policy
        self.api = api
        self.ledger = ledger
        self.audit = audit
        self.breaker = breaker
        self.rules = rules
        self.drain = drain
        self.repair = repair
        self.clock = clock
        self.recheck = recheck
        self.synced = False

    # -- learning from the cluster --------------------------------------------------------------------

    def sync(self) -> None:
        """Learn from the cluster what earlier runs did: recent transitions (for the limits), marked nodes."""
        try:
            nodes = self.api.list_nodes()
        except ApiError as exc:
            self.audit.error("cannot list nodes to learn earlier remediations; node changes wait", exc)
            return
        now = self.clock()
        for node in nodes:
            self._learn(node, now)
        self.synced = True
        self.audit.states.change("api", "ok", logging.INFO, "Kubernetes API reachable; earlier remediations loaded",
                                 nodes=len(nodes), marked=len(self.ledger.marked))

    def _learn(self, node: Mapping[str, Any], now: datetime) -> None:
        name = node.get("metadata", {}).get("name", "")
        marks = read_marks(node)
        with self.ledger.lock:
            self.ledger.uids[name] = node.get("metadata", {}).get("uid", "")
            if marks.last_transition is not None:
                self.ledger.transitions[name] = marks.last_transition
            if marks.gpus and self.policy.changes_nodes:
                self.ledger.marked.add(name)
        if marks.last_transition is not None and now - marks.last_transition < timedelta(hours=1):
            self.breaker.record(name, marks.last_transition)
        if self.policy.changes_nodes and restricted_by_us(node):
            self._resume(name, node, marks, now)

    def _resume(self, name: str, node: Mapping[str, Any], marks: Marks, now: datetime) -> None:
        """A restarted remediator carries on a node's episode from its phase annotation: no second repair
        request, the drain resumed (evictions are idempotent) unless the node was drained already."""
        raw = (node.get("metadata", {}).get("annotations") or {}).get(PHASE_ANNOTATION)
        try:
            phase = str(json.loads(raw).get("phase", "")) if raw else ""
        except (json.JSONDecodeError, AttributeError):
            phase = ""
        since = marks.last_transition or now
        with self.ledger.lock:
            self.ledger.episodes[name] = Episode(since=since, phase=phase or "quarantined",
                                                 requested=phase in HANDED_OVER, phase_written=bool(raw))
            if self.policy.drain is not None:
                self.ledger.drains[name] = Drain(started=since, uuids=set(marks.gpus),
                                                 fingerprints=set(fingerprints(marks)), done=phase in DRAINED)

    # -- one node -------------------------------------------------------------------------------------

    def reconcile(self, node: str) -> None:
        for _ in range(CONFLICT_RETRIES):
            try:
                self._once(node)
                self.audit.ok()
            except ApiConflictError:
                continue  # the node changed since we read it: read again, decide again
            except ApiError as exc:
                self._failed(node, exc)
            return
        log.warning("node kept changing under us; will try again", extra={"fields": {"node": node}})

    def _failed(self, node: str, exc: ApiError) -> None:
        self.audit.error("cannot change a node; will try again", exc, node=node)
        with self.ledger.lock:
            work = self.ledger.work.get(node)
            action = "taint" if work is not None and work.marks else "untaint"
            if work is not None:
                work.retry_at = self.clock() + RETRY_AFTER_FAILURE
            if exc.status == 404:  # the node is gone (or never was): nothing left to mark, nothing to say
                self.ledger.work.pop(node, None)
                self.ledger.uids.pop(node, None)
        self.audit.metrics.count(action, "failed")

    def _once(self, node: str) -> None:
        now = self.clock()
        decision = self._decide(node, now)
        if decision is None:
            return
        desired = decision.desired
        if decision.transition:
            if not self._may_transition(node, decision, now):
                return
            desired = replace(desired, last_transition=now)
        changed = self._apply(node, decision, desired, now)
        self._commit(node, decision, desired, now)
        if not changed:
            self.audit.metrics.count("taint" if desired.taint_effect else "annotate", "unchanged")

    def _decide(self, node: str, now: datetime) -> _Decision | None:
        obj = self.api.get_node(node)
        with self.ledger.lock:
            self.ledger.uids[node] = obj.get("metadata", {}).get("uid", "")
            work = self.ledger.work.get(node)
            if work is None:
                return None
            marks = dict(work.marks)
            due = work.due_clears(now)
            current = read_marks(obj) if self.policy.changes_nodes else \
                self.ledger.shadow.get(node, Marks(last_transition=self.ledger.transitions.get(node)))
        desired = self.rules.with_devices(node, self._desired(obj, current, marks, due))
        before = restricted_by_us(obj) if self.policy.changes_nodes else current.restricts
        return _Decision(obj, current, desired, marks, due, transition=before != desired.restricts)

    def _may_transition(self, node: str, decision: _Decision, now: datetime) -> bool:
        """The limits (and, to lift the marks, the validation gate) allow this transition now."""
        if not self.synced:
            raise ApiError(0, "earlier remediations not loaded yet")
        restricting = decision.desired.restricts
        if not restricting and not self.repair.validated(node, decision.current, now):
            self.ledger.reschedule(node, now + self.recheck)
            return False
        with self.ledger.lock:
            last = decision.current.last_transition or self.ledger.transitions.get(node)
        verdict = self._check_limits(node, now, restricting, last)
        if not verdict.allowed:
            self._hold(node, decision.obj, verdict, decision.desired, now)
        return verdict.allowed

    def _commit(self, node: str, decision: _Decision, desired: Marks, now: datetime) -> None:
        """The change was made: settle the pending work, remember the transition, carry on the episode."""
        with self.ledger.lock:
            work = self.ledger.work.get(node)
            if work is not None:
                work.settle(decision.marks, decision.due)
                if work.empty():
                    del self.ledger.work[node]
            if decision.transition:
                self.ledger.transitions[node] = now
            if desired.gpus:
                self.ledger.marked.add(node)
            else:
                self.ledger.marked.discard(node)
        if decision.transition:
            self.breaker.record(node, now)
        self.drain.track(node, desired, now)

    def _desired(self, obj: Mapping[str, Any], current: Marks, marks: Mapping[str, GpuMark],
                 due: Mapping[str, set[str]]) -> Marks:
        desired = current
        for uuid, mark in marks.items():
            existing = desired.gpus.get(uuid)
            alerts = {**(existing.alerts if existing else {}), **mark.alerts}
            desired = desired.with_gpu(mark_for(self.policy, uuid, mark.gpu or (existing.gpu if existing else ""),
                                                alerts, existing.since if existing else mark.since,
                                                devices=existing.devices if existing else mark.devices))
        for uuid, cleared in due.items():
            existing = desired.gpus.get(uuid)
            if existing is None or not cleared:
                continue
            remaining = {fp: name for fp, name in existing.alerts.items() if fp not in cleared}
            desired = desired.with_gpu(mark_for(self.policy, uuid, existing.gpu, remaining, existing.since,
                                                devices=existing.devices)) \
                if remaining else desired.without_gpu(uuid)
        unschedulable = bool(obj.get("spec", {}).get("unschedulable"))
        cordoned = desired.wants_cordon and (current.cordoned_by_us or not unschedulable)
        return replace(desired, cordoned_by_us=cordoned)

    # -- the limits -----------------------------------------------------------------------------------

    def _check_limits(self, node: str, now: datetime, restricting: bool, last: datetime | None) -> Verdict:
        if restricting and self.breaker.is_open:  # latched: no need to count the nodes
            return self.breaker.check(node, now, restricting=True, last_transition=None, tainted_after=0,
                                      gpu_nodes=0)
        tainted_after = gpu_nodes = 0
        if restricting:
            nodes = self.api.list_nodes()
            resources = self.policy.limits.gpu_resources
            gpu_node_names = {n["metadata"]["name"] for n in nodes if nodestate.has_gpus(n, resources)}
            gpu_nodes = len(gpu_node_names | self.rules.dra_gpu_nodes())
            restricted = {n["metadata"]["name"] for n in nodes if restricted_by_us(n)} | self.ledger.restricted_shadow()
            tainted_after = len(restricted - {node}) + 1
        return self.breaker.check(node, now, restricting=restricting, last_transition=last,
                                  tainted_after=tainted_after, gpu_nodes=gpu_nodes)

    def _retry_at(self, verdict: Verdict, desired: Marks, now: datetime) -> datetime:
        if verdict.limit == "cooldown":
            return verdict.retry_at or now + self.recheck
        if verdict.limit == "max_nodes_per_hour" and desired.restricts:
            return now + LATCHED  # nothing to try until a person closes the breaker (or it resolves)
        return min(verdict.retry_at or now + self.recheck, now + self.recheck)

    def _hold(self, node: str, obj: Mapping[str, Any], verdict: Verdict, desired: Marks, now: datetime) -> None:
        with self.ledger.lock:
            work = self.ledger.work.get(node)
            if work is None:
                return
            first = work.held != verdict.limit
            work.held = verdict.limit
            work.retry_at = self._retry_at(verdict, desired, now)
        uid = obj.get("metadata", {}).get("uid", "")
        if verdict.limit == "max_nodes_per_hour" and desired.restricts and self.breaker.trip(now, verdict.reason):
            self.audit.node(node, uid, ev.REASON_BREAKER_OPEN,
                            f"Circuit breaker opened: {verdict.reason}. No node gains a taint or cordon until a "
                            "person closes it (POST /breaker/close); changes whose alerts resolve meanwhile are "
                            "dropped.", now, fingerprints=fingerprints(desired), state="breaker-open",
                            identity=f"open|{rfc3339(now)}")
        if not first:
            return
        self.audit.metrics.count("taint" if desired.taint_effect else "untaint",
                                 "deferred" if verdict.limit == "cooldown" else "suppressed")
        reason = ev.REASON_DEFERRED if verdict.limit == "cooldown" else ev.REASON_SUPPRESSED
        self.audit.node(node, uid, reason, f"Not done yet: {changes.describe(desired)}. Held back by "
                        f"{verdict.reason}; it is tried again when the limit allows, and dropped if its alerts "
                        "resolve first.", now, fingerprints=fingerprints(desired), state="held",
                        identity=f"{verdict.limit}|{desired.state_json()}")

    # -- making the change ----------------------------------------------------------------------------

    def _apply(self, node: str, decision: _Decision, desired: Marks, now: datetime) -> bool:
        """Make (or, outside enforce, report) the change; True when there was one."""
        if not self.policy.changes_nodes:
            return self._report(node, decision, desired, now)
        current, obj = decision.current, decision.obj
        rules = self.rules.write(node, current, desired)  # first: the node's marks say what they quarantine
        patch = nodestate.node_patch(obj, current, desired)
        status = nodestate.condition_patch(obj, desired, now)
        if patch is None and status is None and not rules:
            return False
        if patch is not None:
            self.api.patch_node(node, patch)  # ApiConflictError propagates: read again, decide again
        if status is not None:
            self.api.patch_node_status(node, status)
        for action in changes.actions(current, desired, obj):
            self.audit.metrics.count(action, "applied")
        what = changes.describe(desired, shadow=current, obj=obj) + (f", {rules}" if rules else "")
        if decision.transition or (patch is not None and "spec" in patch) or rules:
            restricting = desired.restricts
            self.audit.node(node, obj.get("metadata", {}).get("uid", ""),
                            ev.REASON_TAINTED if restricting else ev.REASON_UNTAINTED,
                            f"gpu-pod-exporter remediate: {what}.", now, fingerprints=fingerprints(desired, current),
                            state=_state(desired), identity=desired.state_json(), warning=restricting)
        else:
            log.info(f"node changed: {what}", extra={"fields": {
                "node": node, "fingerprints": ",".join(fingerprints(desired, current))}})
        return True

    def _report(self, node: str, decision: _Decision, desired: Marks, now: datetime) -> bool:
        """dry-run and events: remember the marks enforce would have made, and say what it would have done."""
        current, obj = decision.current, decision.obj
        if desired == current:
            return False
        rules = self.rules.describe(node, current, desired)
        what = changes.describe(desired, shadow=current) + (f", {rules}" if rules else "")
        with self.ledger.lock:
            self.ledger.shadow[node] = desired
        ours_removed = {**obj, "spec": {**obj.get("spec", {}), "taints": [
            t for t in obj.get("spec", {}).get("taints") or [] if t.get("key") != nodestate.TAINT_KEY]}}
        for action in changes.actions(current, desired, ours_removed):
            self.audit.metrics.count(action, "dry_run")
        self.audit.node(node, obj.get("metadata", {}).get("uid", ""), ev.REASON_DRY_RUN,
                        f"Mode {self.policy.mode}: would {what}. Nothing was changed on the node.", now,
                        fingerprints=fingerprints(desired, current), state=_state(desired),
                        identity=desired.state_json(), warning=False)
        return True
