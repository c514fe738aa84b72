"""The reconciler: make one node's marks what its alerts ask, within the limits.

Per node with due work: read the node, merge the pending marks and the due clears into our marks
on it (``nodestate``), and, when that starts or ends a taint or cordon (a *transition*), ask the
``Breaker`` (and, to lift the marks, the repair pass's validation gate); a held change stays
pending (one Event says why) and is tried again later. ``enforce`` patches the node (with its
resourceVersion; a 409 means read again and decide again) and its condition, then records a
decision Event; ``dry-run`` and ``events`` make the same decisions against the ledger's shadow
marks (so the breaker behaves exactly as it would) and report them in a ``GpuRemediationDryRun``
Event. A node the API server does not know (404) is dropped with its pending work.

No node changes before ``synced`` (``resume.load``: what earlier runs did, learned from the nodes).
"""

from __future__ import annotations

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
from exporter.remediate.ledger import NodeLedger, fingerprints, mark_for
from exporter.remediate.nodestate import GpuMark, Marks, read_marks, restricted_by_us, rfc3339
from exporter.remediate.policy import Policy
from exporter.remediate.repairpass import RepairPass

CONFLICT_RETRIES = 5
RETRY_AFTER_FAILURE = timedelta(seconds=30)
LATCHED = timedelta(days=3650)


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
        desired = self._cleared(self._merged(current, marks), due)
        unschedulable = bool(obj.get("spec", {}).get("unschedulable"))
        cordoned = desired.wants_cordon and (current.cordoned_by_us or not unschedulable)
        return replace(desired, cordoned_by_us=cordoned)

    def _merged(self, current: Marks, marks: Mapping[str, GpuMark]) -> Marks:
        """``current`` with the pending marks merged in (a GPU keeps its first ``since`` and its devices)."""
        desired = current
        for uuid, mark in marks.items():
            existing = desired.gpus.get(uuid)
            if existing is None:
                desired = desired.with_gpu(mark_for(self.policy, uuid, mark.gpu, mark.alerts, mark.since,
                                                    devices=mark.devices))
                continue
            desired = desired.with_gpu(mark_for(self.policy, uuid, mark.gpu or existing.gpu,
                                                {**existing.alerts, **mark.alerts}, existing.since,
                                                devices=existing.devices))
        return desired

    def _cleared(self, desired: Marks, due: Mapping[str, set[str]]) -> Marks:
        """``desired`` without the alerts whose hold passed (a GPU without any left is unmarked)."""
        for uuid, cleared in due.items():
            existing = desired.gpus.get(uuid)
            if existing is None or not cleared:
                continue
            remaining = {fp: name for fp, name in existing.alerts.items() if fp not in cleared}
            desired = desired.with_gpu(mark_for(self.policy, uuid, existing.gpu, remaining, existing.since,
                                                devices=existing.devices)) \
                if remaining else desired.without_gpu(uuid)
        return desired

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
        self._tell(node, decision, desired, what, visible=bool(rules) or (patch is not None and "spec" in patch),
                   now=now)
        return True

    def _tell(self, node: str, decision: _Decision, desired: Marks, what: str, *, visible: bool,
              now: datetime) -> None:
        """A transition or a change scheduling sees (taint, cordon, rules): an Event; anything else: a log line."""
        prints = fingerprints(desired, decision.current)
        if not (decision.transition or visible):
            log.info(f"node changed: {what}", extra={"fields": {"node": node, "fingerprints": ",".join(prints)}})
            return
        restricting = desired.restricts
        self.audit.node(node, decision.obj.get("metadata", {}).get("uid", ""),
                        ev.REASON_TAINTED if restricting else ev.REASON_UNTAINTED,
                        f"gpu-pod-exporter remediate: {what}.", now, fingerprints=prints, state=_state(desired),
                        identity=desired.state_json(), warning=restricting)

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
