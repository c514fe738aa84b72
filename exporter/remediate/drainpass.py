"""The drain pass: evict the pods of a quarantined node's failed GPUs, and say what still holds it.

Which pods and when is ``drain.plan`` (pure); this pass lists the node's pods, makes the evictions
(``policy/v1`` Eviction, paced per pod on jittered windows while a PodDisruptionBudget refuses
with 429) and keeps the node's phase true: ``draining`` with what blocks it (the
PodDisruptionBudget by name, a pod allowed to complete, pods it cannot place on a GPU) for as long
as anything does, then ``GpuRemediationDrained``. In ``dry-run`` and ``events`` it reports the plan
instead, once per distinct plan.

**Which pods hold a failed GPU.** The alerts name the pod of a GPU one pod holds (the exporter's
attribution labels); with ``--kubernetes-virtual-gpus`` they name every pod sharing it. A GPU alert
without pod labels is about an idle GPU or a GPU shared in the exporter's default mode, and the API
server does not say which pods hold which device-plugin GPU. So the pass drains what it knows and,
if the node still runs GPU pods it cannot place, leaves them alone and names them as the blocker:
the node is not marked Drained while a pod may still be using the failed GPU (issue 41).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from exporter.backoff import Backoff, BackoffPolicy
from exporter.logs import get_logger
from exporter.remediate import drain as drains
from exporter.remediate import events as ev
from exporter.remediate.audit import Audit
from exporter.remediate.devicerules import DeviceRuleWriter
from exporter.remediate.kubeapi import ApiError, KubeApi
from exporter.remediate.ledger import NODE_LEVEL, Drain, Episode, NodeLedger, fingerprints, named_pods
from exporter.remediate.nodestate import Marks, rfc3339
from exporter.remediate.phases import Phases
from exporter.remediate.policy import Policy

log = get_logger("remediate")

# Pacing of evictions a PodDisruptionBudget refuses (429): jittered windows from 5 s up to 5 min per pod.
EVICTION_BACKOFF = BackoffPolicy(initial_s=5.0, max_s=300.0)
_BUDGET = re.compile(r"disruption budget (\S+)")

Pod = tuple[str, str]


def refusal_text(pod: Pod, message: str) -> str:
    """``ml/a: eviction refused by PodDisruptionBudget ml/trainer (...)``: the budget by name when the API
    server gave it (kube-apiserver does, in the 429's causes)."""
    found = _BUDGET.search(message)
    who = f"PodDisruptionBudget {pod[0]}/{found.group(1)}" if found else "a PodDisruptionBudget (429)"
    return f"{pod[0]}/{pod[1]}: eviction refused by {who} ({message})"


class DrainPass:
    def __init__(self, policy: Policy, api: KubeApi, ledger: NodeLedger, audit: Audit, *, phases: Phases,
                 rules: DeviceRuleWriter, clock: Callable[[], datetime], stop: threading.Event) -> None:
        self.policy = policy
        self.api = api
        self.ledger = ledger
        self.audit = audit
        self.phases = phases
        self.rules = rules
        self.clock = clock
        self.stop = stop

    def track(self, node: str, desired: Marks, now: datetime) -> None:
        """A node that carries our taint or cordon is in an episode and is drained (when the policy has
        ``drain``); one that is healthy again is in neither."""
        with self.ledger.lock:
            episode = None
            if not desired.restricts:
                self.ledger.drains.pop(node, None)
                episode = self.ledger.episodes.pop(node, None)
            else:
                self.ledger.episodes.setdefault(node, Episode(since=now))
        if episode is not None and episode.phase_written:
            self.phases.write(node, None)
        if self.policy.drain is None or not desired.restricts:
            return
        with self.ledger.lock:
            drain = self.ledger.drains.setdefault(node, Drain(started=now, uuids=set(), fingerprints=set()))
            if not set(desired.gpus) <= drain.uuids:
                drain.done = False  # another GPU failed: its pods are drained too
            drain.uuids |= set(desired.gpus)
            drain.fingerprints |= set(fingerprints(desired))

    def run(self) -> None:
        if self.policy.drain is None:
            return
        with self.ledger.lock:
            active = [(node, drain) for node, drain in self.ledger.drains.items() if not drain.done]
        for node, drain in active:
            if self.stop.is_set():
                return
            try:
                self._drain(node, drain)
            except ApiError as exc:
                self.audit.error("cannot list the pods of a node; the drain waits", exc, node=node)

    # -- one node ---------------------------------------------------------------------------------

    def _drain(self, node: str, drain: Drain) -> None:
        now = self.clock()
        decisions, unplaced = self._plan(node, drain, self.api.list_pods_on_node(node), now)
        if not self.policy.changes_nodes:
            self._report(node, drain, decisions, unplaced, now)
            return
        for decision in decisions:
            if decision.action == "evict":
                self._evict(node, drain, decision, now)
        left, unplaced = self._plan(node, drain, self.api.list_pods_on_node(node), now)
        blockers = self._blockers(drain, drains.remaining(left), unplaced)
        if blockers:
            self._show(node, drain, blockers, now)
        else:
            self._done(node, drain, decisions, now)

    def _targets(self, node: str, drain: Drain) -> tuple[set[Pod] | None, list[tuple[str, str]]]:
        """(the pods the alerts name on the failed GPUs, None: every GPU pod of the node (a node-level alert);
        the (uuid, index) of failed GPUs whose alerts name no pod)."""
        named: set[Pod] = set()
        unknown: list[tuple[str, str]] = []
        for uuid in sorted(drain.uuids):
            if uuid == NODE_LEVEL:
                return None, []
            alerts = self.ledger.alerts_on(node, uuid)
            on_gpu = named_pods(alerts)
            named |= on_gpu
            if not on_gpu:
                unknown.append((uuid, next((f"GPU {a.labels.get('gpu', '?')}" for a in alerts),
                                           "a GPU whose alerts were not received since the remediator started")))
        return named, unknown

    def _plan(self, node: str, drain: Drain, pods: list[dict[str, Any]],
              now: datetime) -> tuple[list[drains.PodDecision], list[str]]:
        """(the plan, a blocker when failed GPUs' pods cannot be told from the node's other GPU pods)."""
        policy = self.policy.drain
        assert policy is not None

        def plan(on_failed: set[Pod] | None) -> list[drains.PodDecision]:
            return drains.plan(pods, policy, on_failed_gpus=on_failed, gpu_resources=self.policy.limits.gpu_resources,
                               started=drain.started, now=now)

        named, unknown = self._targets(node, drain)
        decisions = plan(named)
        if named is None or not unknown:
            return decisions, []
        maybe = [f"{d.namespace}/{d.name}" for d in drains.remaining(plan(None)) if (d.namespace, d.name) not in named]
        if not maybe:
            return decisions, []  # no other GPU pod on the node: nothing can be holding those GPUs
        gpus = ", ".join(f"{gpu} ({uuid})" for uuid, gpu in unknown)
        return decisions, [f"cannot tell which pods hold {gpus}: no alert about it names a pod (an idle GPU, or one "
                           f"shared in the exporter's default mode); left alone, and may hold it: {', '.join(maybe)} "
                           "(run the exporter with --kubernetes-virtual-gpus so that alerts name every pod of a "
                           "shared GPU, or move these pods off by hand)"]

    def _blockers(self, drain: Drain, left: list[drains.PodDecision], unplaced: list[str]) -> list[str]:
        blockers = []
        for decision in left:
            key = (decision.namespace, decision.name)
            if key in drain.refusals:
                blockers.append(refusal_text(key, drain.refusals[key]))
            elif decision.action == "wait":
                blockers.append(f"{decision.namespace}/{decision.name}: {decision.why}")
            else:
                blockers.append(f"{decision.namespace}/{decision.name}: to be evicted ({decision.why})")
        return blockers + unplaced

    def _show(self, node: str, drain: Drain, blockers: list[str], now: datetime) -> None:
        """The node is ``draining``: the phase, with what blocks the drain, on the node (when that changed)."""
        text = "; ".join(blockers)
        if text == drain.blockers:
            return
        with self.ledger.lock:
            episode = self.ledger.episodes.setdefault(node, Episode(since=drain.started))
        why = f"Draining the pods of the failed GPUs; waiting for: {text}"
        if self.phases.set(node, episode, "draining", why, now):
            drain.blockers = text
            log.info("remediation transition", extra={"fields": {
                "node": node, "event": "draining", "state": "draining",
                "fingerprints": ",".join(sorted(drain.fingerprints)), "why": why}})

    def _done(self, node: str, drain: Drain, decisions: list[drains.PodDecision], now: datetime) -> None:
        drain.done = True
        skipped = [d for d in decisions if d.action == "skip"]
        message = "Drained: no pod on the failed GPUs is left to evict" + (
            f"; left alone: {drains.describe(skipped)}" if skipped else "") + "."
        self.audit.node(node, "", ev.REASON_DRAINED, message, now, fingerprints=drain.fingerprints, state="drained",
                        identity=f"drained|{rfc3339(drain.started)}|{','.join(sorted(drain.uuids))}", warning=False)
        if not self.policy.repair_request:
            with self.ledger.lock:
                episode = self.ledger.episodes.setdefault(node, Episode(since=drain.started))
            self.phases.set(node, episode, "drained", message + " The node stays quarantined until its alerts "
                            "resolve and the hold passes (or a person clears it).", now)
        self.rules.after_drain(node)

    def _report(self, node: str, drain: Drain, decisions: list[drains.PodDecision], unplaced: list[str],
                now: datetime) -> None:
        """dry-run and events: the plan, once per distinct plan; the repair pass follows it."""
        text = drains.describe(decisions) + "".join(f"; {blocker}" for blocker in unplaced)
        if text == drain.reported:
            return
        drain.reported = text
        self.audit.node(node, "", ev.REASON_DRY_RUN, f"Mode {self.policy.mode}: would drain: {text}. "
                        "No pod was evicted.", now, fingerprints=drain.fingerprints, state="draining",
                        identity=f"drain|{text}", warning=False)

    def _evict(self, node: str, drain: Drain, decision: drains.PodDecision, now: datetime) -> None:
        key = (decision.namespace, decision.name)
        backoff, not_before = drain.backoff.get(key, (None, now))
        if now < not_before:
            return
        try:
            self.api.evict_pod(*key)
        except ApiError as exc:
            self._refused(node, drain, key, exc, backoff=backoff, now=now)
            return
        drain.backoff.pop(key, None)
        drain.refusals.pop(key, None)
        self.audit.metrics.count("evict", "applied")
        self.audit.ok()
        pod = ev.PodRef(*key)
        message = (f"Evicted by gpu-pod-exporter remediate: the GPU it used on node {node} is unhealthy "
                   f"({decision.why}).")
        log.warning("remediation transition", extra={"fields": {
            "node": node, "event": ev.REASON_EVICTED, "state": "draining", "pod": str(pod),
            "fingerprints": ",".join(sorted(drain.fingerprints)), "why": message}})
        self.audit.pod(pod, ev.REASON_EVICTED, message, now, identity=f"evict|{rfc3339(drain.started)}")

    def _refused(self, node: str, drain: Drain, key: Pod, exc: ApiError, *, backoff: Backoff | None,
                 now: datetime) -> None:
        if exc.status == 404:
            return  # gone already
        if exc.status != 429:
            self.audit.error("cannot evict a pod; will try again", exc, node=node, pod="/".join(key))
            self.audit.metrics.count("evict", "failed")
            return
        backoff = backoff or Backoff(EVICTION_BACKOFF)
        delay = backoff.failed(now.timestamp())
        drain.backoff[key] = (backoff, now + timedelta(seconds=delay))
        drain.refusals[key] = exc.message
        self.audit.metrics.count("evict", "deferred")
        log.info("eviction refused by a PodDisruptionBudget; trying again later", extra={"fields": {
            "node": node, "pod": "/".join(key), "retry_in_s": round(delay, 1), "attempt": backoff.failures,
            "why": exc.message}})
