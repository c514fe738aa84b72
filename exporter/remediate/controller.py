"""The remediator: alerts in, node changes and Events out, one node at a time, within the limits.

``receive()`` runs in the webhook's thread and only records what the notification says (it never
waits for the API server): a new firing occurrence (``fingerprint@startsAt``) of an allowlisted
alert becomes a *mark* for its GPU on its node and an alert-context Event; a resolution becomes a
*clear* due after the alert's hold (``untaint_after``; never, by default). An occurrence seen
before (Alertmanager's repeats and retries, a replayed webhook) changes nothing.

A single worker thread (``run_once`` per pass) does the API work:

1. alert-context Events on the node and on every pod of the GPU;
2. per node with due work: read the node, apply the marks and due clears to our marks on it
   (``nodestate``), and, when that starts or ends a taint or cordon (a *transition*), ask the
   ``Breaker``; a held change stays pending (one Event says why) and is tried again later;
3. ``enforce``: patch the node (with its resourceVersion; a 409 means read again and recompute)
   and its condition, then record a decision Event. ``dry-run`` and ``events``: the same decisions
   against an in-memory copy of the marks (so the breaker behaves exactly as it would), reported
   in a ``GpuRemediationDryRun`` Event and the log, and no node is patched.

Failures of the API server are retried with backoff (``kubeapi``), then the work stays pending
and the pass after next tries again; nothing is dropped except Events that keep failing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from exporter.backoff import Backoff as DrainBackoff
from exporter.backoff import BackoffPolicy
from exporter.logs import StateLog, get_logger
from exporter.metrics.hostname_label import node_name
from exporter.remediate import devicetaints as dt
from exporter.remediate import drain as drains
from exporter.remediate import events as ev
from exporter.remediate import repair
from exporter.remediate.alerts import Alert, Notification
from exporter.remediate.breaker import Breaker, Verdict
from exporter.remediate.kubeapi import ApiConflictError, ApiError, KubeApi
from exporter.remediate.nodestate import (
    PHASE_ANNOTATION,
    TAINT_KEY,
    GpuMark,
    Marks,
    condition_patch,
    has_gpus,
    node_patch,
    our_taint,
    read_marks,
    restricted_by_us,
    rfc3339,
)
from exporter.remediate.policy import Policy
from exporter.remediate.selfmetrics import RemediationMetrics

log = get_logger("remediate")

NODE_ACTIONS = frozenset({"taint", "cordon", "annotate", "condition"})
NODE_LEVEL = "node"  # the mark of an alert about the whole node (no UUID label)
CONFLICT_RETRIES = 5
EVENT_ATTEMPTS = 3
RETRY_AFTER_FAILURE = timedelta(seconds=30)
SEEN_LIMIT = 100_000
SEEN_TTL = timedelta(days=7)
LATCHED = timedelta(days=3650)
# Pacing of evictions a PodDisruptionBudget refuses (429): jittered windows from 5 s up to 5 min per pod.
EVICTION_BACKOFF = BackoffPolicy(initial_s=5.0, max_s=300.0)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class _Context:
    """An alert-context Event to record: the alert and the GPU it is about."""

    node: str
    uuid: str
    alert: Alert
    attempts: int = 0
    not_before: datetime | None = None


@dataclass
class _NodeWork:
    """What is pending for one node."""

    marks: dict[str, GpuMark] = field(default_factory=dict)  # uuid -> mark to merge in
    clears: dict[str, dict[str, datetime]] = field(default_factory=dict)  # uuid -> fingerprint -> due
    retry_at: datetime | None = None  # not before (held or failed)
    held: str = ""  # the limit holding it, for one Event per episode

    def empty(self) -> bool:
        return not self.marks and not self.clears

    def next_due(self) -> datetime | None:
        """When this work can next make progress: marks at once, clears at their hold; never before retry_at."""
        times = [due for clears in self.clears.values() for due in clears.values()]
        if self.marks:
            times.append(datetime.min.replace(tzinfo=UTC))
        if not times:
            return None
        first = min(times)
        return max(first, self.retry_at) if self.retry_at is not None else first


@dataclass
class _Drain:
    """A drain in progress on one quarantined node."""

    started: datetime
    uuids: set[str]
    fingerprints: set[str]
    backoff: dict[tuple[str, str], tuple[DrainBackoff, datetime]] = field(default_factory=dict)
    reported: str = ""  # the plan last reported (dry-run and events: once per distinct plan)
    done: bool = False


@dataclass
class _Episode:
    """One node's way from quarantined back to healthy (docs/remediation.md, "State machine")."""

    since: datetime
    phase: str = "quarantined"
    requested: bool = False
    job: str = ""  # the validation Job of this attempt
    attempt: int = 0
    validated: bool = False
    phase_written: bool = False


def mark_for(policy: Policy, uuid: str, gpu: str, alerts: Mapping[str, str], since: str, *,
             devices: tuple[dt.DeviceRef, ...] = ()) -> GpuMark:
    """A GPU's mark from the alerts that hold it (fingerprint -> name) and what their policies ask; ``devices``:
    its DRA devices, once looked up (they stay with the mark)."""
    policies = [p for p in (policy.for_alert(name) for name in alerts.values()) if p is not None]
    effects = [p.taint_effect for p in policies if p.does("taint")]
    strongest = max(effects, key=("PreferNoSchedule", "NoSchedule", "NoExecute").index) if effects else None
    return GpuMark(uuid=uuid, gpu=gpu, alerts=MappingProxyType(dict(alerts)), since=since, taint_effect=strongest,
                   cordon=any(p.does("cordon") for p in policies),
                   annotate=any(p.does("annotate") for p in policies),
                   condition=any(p.does("condition") for p in policies), devices=devices)


def _fingerprints(*states: Marks) -> list[str]:
    """The fingerprints of the alerts behind these marks, for the audit line."""
    return sorted({fp for marks in states for mark in marks.gpus.values() for fp in mark.alerts})


def _state(marks: Marks) -> str:
    return "quarantined" if marks.gpus or marks.restricts else "healthy"


def _target(alert: Alert) -> str:
    uuid = alert.labels.get("UUID", "")
    return f"GPU {alert.labels.get('gpu', '?')} ({uuid})" if uuid else "the node"


def _gpu_label(alert: Alert, uuid: str) -> str:
    return NODE_LEVEL if uuid == NODE_LEVEL else alert.labels.get("gpu", "")


class Remediator:
    def __init__(self, policy: Policy, api: KubeApi, metrics: RemediationMetrics, *, clock: Clock = utc_now,
                 recheck_s: float = 15.0, instance: str = "") -> None:
        self.policy = policy
        self.api = api
        self.metrics = metrics
        self.clock = clock
        self.recheck = timedelta(seconds=recheck_s)
        self.instance = instance
        self.breaker = Breaker(policy.limits)
        self._lock = threading.Condition()
        self._seen: dict[str, datetime] = {}
        self._firing: dict[tuple[str, str], dict[str, Alert]] = {}  # (node, uuid) -> fingerprint -> alert
        self._contexts: list[_Context] = []
        self._work: dict[str, _NodeWork] = {}
        self._shadow: dict[str, Marks] = {}  # dry-run / events: the marks enforce mode would have made
        self._transitions: dict[str, datetime] = {}
        self._marked: set[str] = set()
        self._dropped: list[tuple[str, Alert, str]] = []  # (node, resolved alert, the limit that held it)
        self._drains: dict[str, _Drain] = {}
        self._episodes: dict[str, _Episode] = {}
        self._uids: dict[str, str] = {}  # node name -> uid, for Events recorded away from the node object
        self._rule_version: str | None = None  # the resource.k8s.io version serving DeviceTaintRules
        self._rule_version_known = False
        self._synced = False
        self._stop = api.stop
        self._thread: threading.Thread | None = None
        self._states = StateLog(log)
        self.last_error = ""

    # -- webhook side ------------------------------------------------------------------------

    def receive(self, notification: Notification) -> dict[str, int]:
        """Record a notification; returns counts by handling (new, repeat, ignored, unusable)."""
        counts = dict.fromkeys(("new", "repeat", "ignored", "unusable"), 0)
        now = self.clock()
        with self._lock:
            for alert in notification.alerts:
                handling = self._record(alert, now)
                counts[handling] += 1
                self.metrics.alerts.labels(alert.status, handling).inc()
            if notification.truncated_alerts:
                self._states.once(("truncated", notification.group_key), logging.WARNING,
                                  "Alertmanager truncated a notification: raise max_alerts on the receiver",
                                  group=notification.group_key, truncated=notification.truncated_alerts)
            self._prune_seen(now)
            self._lock.notify_all()
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
        # An alert without a UUID (NVSwitch, fabric manager, a GPU missing from the node's count) is about the
        # node as a whole: it is marked under NODE_LEVEL and leads to the same node-level actions.
        uuid = alert.labels.get("UUID", "") or NODE_LEVEL
        if not node:
            self._states.once(("unusable", alert.name), logging.WARNING,
                              f"alert without the {self.policy.node_label} label: cannot tell which node "
                              "it is about; ignored", alert=alert.name)
            return "unusable"
        key = alert.occurrence + ("" if alert.firing else "/resolved")
        if key in self._seen:
            return "repeat"
        self._seen[key] = now
        firing = self._firing.setdefault((node, uuid), {})
        work = self._work.setdefault(node, _NodeWork())
        if alert.firing:
            firing[alert.fingerprint] = alert
            work.clears.get(uuid, {}).pop(alert.fingerprint, None)  # it fired again: no clearing
            if policy.actions & NODE_ACTIONS:
                previous = work.marks.get(uuid)
                alerts = {**(previous.alerts if previous else {}), alert.fingerprint: alert.name}
                work.marks[uuid] = mark_for(self.policy, uuid, _gpu_label(alert, uuid), alerts,
                                            previous.since if previous else rfc3339(alert.starts_at))
            if policy.does("event") and self.policy.mode != "dry-run":
                self._contexts.append(_Context(node, uuid, alert))
            log.info("alert firing", extra={"fields": {
                "alert": alert.name, "node": node, "gpu": alert.labels.get("gpu"), "uuid": uuid,
                "xid": alert.labels.get("xid", ""), "fingerprint": alert.fingerprint}})
        else:
            firing.pop(alert.fingerprint, None)
            self._drop_pending(node, uuid, work, alert)
            if policy.untaint_after_s is None:
                log.info("alert resolved; the GPU stays marked until a person clears it (untaint_after: never)",
                         extra={"fields": {"alert": alert.name, "node": node, "uuid": uuid}})
            else:
                due = (alert.ends_at or now) + timedelta(seconds=policy.untaint_after_s)
                work.clears.setdefault(uuid, {})[alert.fingerprint] = due
                log.info("alert resolved; clearing after the hold", extra={"fields": {
                    "alert": alert.name, "node": node, "uuid": uuid, "clear_at": rfc3339(due)}})
        if work.empty():
            self._work.pop(node, None)
        return "new"

    def _drop_pending(self, node: str, uuid: str, work: _NodeWork, alert: Alert) -> None:
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
        self._dropped.append((node, alert, work.held))
        if not work.marks:
            work.held = ""
            work.retry_at = None

    def _prune_seen(self, now: datetime) -> None:
        if len(self._seen) <= SEEN_LIMIT:
            return
        for key, moment in sorted(self._seen.items(), key=lambda item: item[1]):
            if len(self._seen) <= SEEN_LIMIT // 2 and now - moment < SEEN_TTL:
                break
            del self._seen[key]

    # -- worker side -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="remediate", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
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
            with self._lock:
                if not self._stop.is_set() and not self._has_due_work():
                    self._lock.wait(timeout=wait)

    def _has_due_work(self) -> bool:
        now = self.clock()
        if any(c.not_before is None or c.not_before <= now for c in self._contexts):
            return True
        return any((due := work.next_due()) is not None and due <= now for work in self._work.values())

    def run_once(self) -> float:
        """One pass over everything due; returns seconds until something else is due (at most recheck)."""
        if not self._synced:
            self._sync()
        self._record_contexts()
        self._record_dropped()
        now = self.clock()
        with self._lock:
            due = [node for node, work in self._work.items() if (when := work.next_due()) is not None and when <= now]
            due.sort(key=lambda node: bool(self._work[node].marks))  # clears first: they make room under the limits
        for node in due:
            if self._stop.is_set():
                break
            self._record_contexts()  # alerts that arrived meanwhile are explained before nodes change
            self._reconcile(node)
        self._drain_pass()
        self._repair_pass()
        self._publish()
        with self._lock:
            times = [when for work in self._work.values() if (when := work.next_due()) is not None]
            times += [c.not_before or now for c in self._contexts]
        horizon = self.recheck.total_seconds()
        if times:
            horizon = min(horizon, max(0.05, (min(times) - self.clock()).total_seconds()))
        return horizon

    def _sync(self) -> None:
        """Learn from the cluster what earlier runs did: recent transitions (for the limits), marked nodes."""
        try:
            nodes = self.api.list_nodes()
        except ApiError as exc:
            self._note_error("cannot list nodes to learn earlier remediations; node changes wait", exc)
            return
        now = self.clock()
        for node in nodes:
            name = node.get("metadata", {}).get("name", "")
            self._uids[name] = node.get("metadata", {}).get("uid", "")
            marks = read_marks(node)
            if marks.last_transition is not None:
                self._transitions[name] = marks.last_transition
                if now - marks.last_transition < timedelta(hours=1):
                    self.breaker.record(name, marks.last_transition)
            if marks.gpus and self.policy.changes_nodes:
                self._marked.add(name)
            if self.policy.changes_nodes and restricted_by_us(node):
                self._resume(name, node, marks, now)
        self._synced = True
        self._states.change("api", "ok", logging.INFO, "Kubernetes API reachable; earlier remediations loaded",
                            nodes=len(nodes), marked=len(self._marked))

    def _resume(self, name: str, node: Mapping[str, Any], marks: Marks, now: datetime) -> None:
        """A restarted remediator carries on a node's episode from its phase annotation: no second repair
        request, the drain resumed (evictions are idempotent) unless the node was already handed over."""
        raw = (node.get("metadata", {}).get("annotations") or {}).get(PHASE_ANNOTATION)
        try:
            phase = str(json.loads(raw).get("phase", "")) if raw else ""
        except (json.JSONDecodeError, AttributeError):
            phase = ""
        since = marks.last_transition or now
        handed_over = phase in ("repair-requested", "validating")
        with self._lock:
            self._episodes[name] = _Episode(since=since, phase=phase or "quarantined", requested=handed_over,
                                            phase_written=bool(raw))
            if self.policy.drain is not None:
                self._drains[name] = _Drain(started=since, uuids=set(marks.gpus),
                                            fingerprints=set(_fingerprints(marks)), done=handed_over)

    # -- alert-context Events ------------------------------------------------------------------

    def _record_contexts(self) -> None:
        now = self.clock()
        with self._lock:
            ready = [c for c in self._contexts if c.not_before is None or c.not_before <= now]
            self._contexts = [c for c in self._contexts if not (c.not_before is None or c.not_before <= now)]
        pods_by_node: dict[str, list[dict[str, Any]] | None] = {}
        for context in ready:
            if context.node not in pods_by_node:
                try:
                    pods_by_node[context.node] = self.api.list_pods_on_node(context.node)
                except ApiError as exc:
                    self._note_error("cannot list the pods of a node; alert Events wait", exc, node=context.node)
                    pods_by_node[context.node] = None
            listing = pods_by_node[context.node]
            if listing is None:
                self._retry_context(context)
                continue
            try:
                self._post_context(context, listing, now)
                self._note_ok()
            except ApiError as exc:
                self._note_error("cannot record an alert Event", exc, node=context.node)
                self._retry_context(context)

    def _record_dropped(self) -> None:
        """One Event and log line per change dropped because its alert resolved before it was made."""
        with self._lock:
            dropped, self._dropped = self._dropped, []
        now = self.clock()
        for node, alert, held in dropped:
            why = f" while held by {held}" if held else " before it was made"
            message = (f"Dropped: {alert.name} for {_target(alert)} resolved{why}; "
                       "the node is not changed for it.")
            self.metrics.count("taint", "dropped")
            try:
                self._audit(node, "", ev.REASON_DROPPED, message, now, fingerprints=[alert.fingerprint],
                            state="healthy", identity=f"dropped|{alert.occurrence}", warning=False)
            except ApiError as exc:
                self._note_error("cannot record an Event", exc, node=node)

    def _audit(self, node: str, uid: str, reason: str, message: str, now: datetime, *, fingerprints: Iterable[str],
               state: str, identity: str, warning: bool = True) -> None:
        """Every transition: one Event on the node and one structured log line naming the alert fingerprints."""
        prints = sorted(set(fingerprints))
        uid = uid or self._uids.get(node, "")  # kubectl describe finds a node's Events by its uid
        log.log(logging.WARNING if warning else logging.INFO, "remediation transition", extra={"fields": {
            "node": node, "event": reason, "state": state, "fingerprints": ",".join(prints), "why": message}})
        self._post(*ev.node_event(node, uid, reason, message, now, identity=identity, warning=warning,
                                  instance=self.instance))

    def _retry_context(self, context: _Context) -> None:
        if context.attempts + 1 >= EVENT_ATTEMPTS:
            self.metrics.count("event", "failed")
            log.error("alert Event dropped after repeated failures", extra={"fields": {
                "node": context.node, "alert": context.alert.name}})
            return
        with self._lock:
            self._contexts.append(replace(context, attempts=context.attempts + 1,
                                          not_before=self.clock() + RETRY_AFTER_FAILURE))

    def _pods_on_gpu(self, node: str, uuid: str, listing: Iterable[Mapping[str, Any]]) -> list[ev.PodRef]:
        with self._lock:
            alerts = list(self._firing.get((node, uuid), {}).values())
        named = {(a.labels["namespace"], a.labels["pod"]) for a in alerts
                 if a.labels.get("pod") and a.labels.get("namespace")}
        uids = {(p.get("metadata", {}).get("namespace", ""), p.get("metadata", {}).get("name", "")):
                p.get("metadata", {}).get("uid", "") for p in listing}
        return [ev.PodRef(namespace, name, uids.get((namespace, name), "")) for namespace, name in sorted(named)]

    def _post_context(self, context: _Context, listing: list[dict[str, Any]], now: datetime) -> None:
        alert = context.alert
        pods = self._pods_on_gpu(context.node, context.uuid, listing)
        if alert.labels.get("pod") and alert.labels.get("namespace"):
            own = ev.PodRef(alert.labels["namespace"], alert.labels["pod"])
            if own not in {ev.PodRef(p.namespace, p.name) for p in pods}:
                pods.append(own)
        message = ev.alert_context(alert.labels, alert.annotations, pods, node=context.node)
        self._post(*ev.node_event(context.node, self._uids.get(context.node, ""), alert.name, message, now,
                                  identity=alert.occurrence,
                                  instance=self.instance))
        for pod in pods:
            if not pod.uid:
                continue  # not (or no longer) on this node: nothing to attach the Event to
            text = f"The GPU this pod uses is unhealthy. {message}"
            self._post(*ev.pod_event(pod, alert.name, text, now, identity=alert.occurrence, instance=self.instance))

    def _post(self, namespace: str, event: dict[str, Any]) -> None:
        try:
            self.api.create_event(namespace, event)
        except ApiConflictError:
            self.metrics.count("event", "unchanged")  # recorded before (a replay after a restart)
            return
        self.metrics.count("event", "applied")
        log.info("event recorded", extra={"fields": {
            "object": f"{event['involvedObject']['kind']}/{event['involvedObject']['name']}",
            "reason": event["reason"]}})

    # -- node changes ---------------------------------------------------------------------------

    def _reconcile(self, node: str) -> None:
        for _ in range(CONFLICT_RETRIES):
            try:
                self._reconcile_once(node)
                self._note_ok()
            except ApiConflictError:
                continue  # the node changed since we read it: read again, decide again
            except ApiError as exc:
                self._note_error("cannot change a node; will try again", exc, node=node)
                with self._lock:
                    work = self._work.get(node)
                    action = "taint" if work is not None and work.marks else "untaint"
                    if work is not None:
                        work.retry_at = self.clock() + RETRY_AFTER_FAILURE
                    if exc.status == 404:
                        self._work.pop(node, None)  # the node is gone; nothing left to mark
                self.metrics.count(action, "failed")
            return
        log.warning("node kept changing under us; will try again", extra={"fields": {"node": node}})

    def _reconcile_once(self, node: str) -> None:
        now = self.clock()
        obj = self.api.get_node(node)
        self._uids[node] = obj.get("metadata", {}).get("uid", "")
        with self._lock:
            work = self._work.get(node)
            if work is None:
                return
            marks = dict(work.marks)
            due = {uuid: {fp for fp, when in clears.items() if when <= now} for uuid, clears in work.clears.items()}
        enforce = self.policy.changes_nodes
        current = read_marks(obj) if enforce else \
            self._shadow.get(node, Marks(last_transition=self._transitions.get(node)))
        desired = self._with_devices(node, self._desired(obj, current, marks, due))
        before = restricted_by_us(obj) if enforce else current.restricts
        after = desired.restricts
        transition = before != after
        if transition:
            if not self._synced:
                raise ApiError(0, "earlier remediations not loaded yet")
            if before and not after and not self._validated(node, current, now):
                with self._lock:
                    work = self._work.get(node)
                    if work is not None:
                        work.retry_at = now + self.recheck
                return
            verdict = self._check_limits(node, now, after, current.last_transition or self._transitions.get(node))
            if not verdict.allowed:
                self._hold(node, obj, verdict, desired, now)
                return
            desired = replace(desired, last_transition=now)
        changed = self._apply(node, obj, current, desired, now, transition=transition, restricting=after)
        with self._lock:
            work = self._work.get(node)
            if work is not None:
                for uuid, mark in marks.items():
                    if work.marks.get(uuid) == mark:
                        del work.marks[uuid]
                for uuid, fps in due.items():
                    for fp in fps:
                        work.clears.get(uuid, {}).pop(fp, None)
                    if not work.clears.get(uuid, True):
                        del work.clears[uuid]
                work.retry_at = None
                work.held = ""
                if work.empty():
                    del self._work[node]
        if transition:
            self.breaker.record(node, now)
            self._transitions[node] = now
        if desired.gpus:
            self._marked.add(node)
        else:
            self._marked.discard(node)
        self._track_drain(node, desired, now)
        if not changed:
            self.metrics.count("taint" if desired.taint_effect else "annotate", "unchanged")

    # -- drain ------------------------------------------------------------------------------------

    def _track_drain(self, node: str, desired: Marks, now: datetime) -> None:
        """A node that carries our taint or cordon is in an episode and is drained (when the policy has
        ``drain``); one that is healthy again is in neither."""
        with self._lock:
            if not desired.restricts:
                self._drains.pop(node, None)
                episode = self._episodes.pop(node, None)
            else:
                episode = None
                self._episodes.setdefault(node, _Episode(since=now))
        if episode is not None and episode.phase_written:
            self._write_phase(node, None)
        if self.policy.drain is None or not desired.restricts:
            return
        with self._lock:
            drain = self._drains.setdefault(node, _Drain(started=now, uuids=set(), fingerprints=set()))
            if not set(desired.gpus) <= drain.uuids:
                drain.done = False  # another GPU failed: its pods are drained too
            drain.uuids |= set(desired.gpus)
            drain.fingerprints |= set(_fingerprints(desired))

    def _pods_on_failed_gpus(self, node: str, uuids: Iterable[str]) -> set[tuple[str, str]] | None:
        """The pods the alerts name for these GPUs; None when the allocation is unknown (a node-level alert)."""
        named: set[tuple[str, str]] = set()
        with self._lock:
            for uuid in uuids:
                if uuid == NODE_LEVEL:
                    return None
                for alert in self._firing.get((node, uuid), {}).values():
                    if alert.labels.get("pod") and alert.labels.get("namespace"):
                        named.add((alert.labels["namespace"], alert.labels["pod"]))
        return named

    def _drain_pass(self) -> None:
        policy = self.policy.drain
        if policy is None:
            return
        with self._lock:
            active = [(node, drain) for node, drain in self._drains.items() if not drain.done]
        for node, drain in active:
            if self._stop.is_set():
                return
            now = self.clock()
            try:
                pods = self.api.list_pods_on_node(node)
            except ApiError as exc:
                self._note_error("cannot list the pods of a node; the drain waits", exc, node=node)
                continue
            decisions = drains.plan(pods, policy, on_failed_gpus=self._pods_on_failed_gpus(node, drain.uuids),
                                    gpu_resources=self.policy.limits.gpu_resources, started=drain.started, now=now)
            if not self.policy.changes_nodes:
                text = drains.describe(decisions)
                if text != drain.reported:
                    drain.reported = text
                    self._audit(node, "", ev.REASON_DRY_RUN, f"Mode {self.policy.mode}: would drain: {text}. "
                                "No pod was evicted.", now, fingerprints=drain.fingerprints, state="draining",
                                identity=f"drain|{text}", warning=False)
                continue
            for decision in decisions:
                if decision.action == "evict":
                    self._evict(node, drain, decision, now)
            left = drains.remaining(drains.plan(self.api.list_pods_on_node(node), policy,
                                                on_failed_gpus=self._pods_on_failed_gpus(node, drain.uuids),
                                                gpu_resources=self.policy.limits.gpu_resources,
                                                started=drain.started, now=now))
            if not left:
                drain.done = True
                skipped = [d for d in decisions if d.action == "skip"]
                self._audit(node, "", ev.REASON_DRAINED, "Drained: no pod on the failed GPUs is left to evict"
                            + (f"; left alone: {drains.describe(skipped)}" if skipped else "") + ".", now,
                            fingerprints=drain.fingerprints, state="drained",
                            identity=f"drained|{rfc3339(drain.started)}|{','.join(sorted(drain.uuids))}",
                            warning=False)
                self._rules_after_drain(node)

    # -- hand-off and re-admission -------------------------------------------------------------------

    def _write_phase(self, node: str, phase: dict[str, str] | None) -> None:
        """The phase beyond "quarantined" on the node, for ``remediate status`` and a restarted remediator."""
        if not self.policy.changes_nodes:
            return
        value = json.dumps(phase, sort_keys=True, separators=(",", ":")) if phase is not None else None
        try:
            self.api.patch_node(node, {"metadata": {"annotations": {PHASE_ANNOTATION: value}}})
        except ApiError as exc:
            self._note_error("cannot record the remediation phase on the node", exc, node=node)

    def _enter(self, node: str, episode: _Episode, phase: str, *, reason: str, why: str, now: datetime,
               fingerprints: Iterable[str], warning: bool = False) -> None:
        episode.phase = phase
        episode.phase_written = self.policy.changes_nodes
        self._write_phase(node, {"phase": phase, "why": why, "since": rfc3339(now)})
        self._audit(node, "", reason, why, now, fingerprints=fingerprints, state=phase,
                    identity=f"{phase}|{rfc3339(episode.since)}|{episode.attempt}", warning=warning)

    def _node_alerts(self, node: str) -> tuple[dict[str, str], list[Alert]]:
        """(UUID -> GPU index, the alerts) of what is firing on ``node``."""
        gpus: dict[str, str] = {}
        alerts: list[Alert] = []
        with self._lock:
            for (name, uuid), firing in self._firing.items():
                if name == node and firing:
                    alerts.extend(firing.values())
                    gpus[uuid] = _gpu_label(next(iter(firing.values())), uuid)
        return gpus, alerts

    def _repair_pass(self) -> None:
        """Quarantined (and drained, when draining): hand the node to repair with a GpuRepairRequest."""
        if not self.policy.repair_request:
            return
        with self._lock:
            waiting = [(node, ep) for node, ep in self._episodes.items() if not ep.requested
                       and (self.policy.drain is None or (node in self._drains and self._drains[node].done))]
        for node, episode in waiting:
            now = self.clock()
            gpus, alerts = self._node_alerts(node)
            body = repair.repair_request(node, episode.since, gpus, alerts)
            prints = [a.fingerprint for a in alerts]
            if not self.policy.changes_nodes:
                episode.requested = True
                self._audit(node, "", ev.REASON_DRY_RUN, f"Mode {self.policy.mode}: would create {repair.KIND} "
                            f"{body['metadata']['name']} for GPUs {', '.join(sorted(gpus)) or 'none'}.", now,
                            fingerprints=prints, state="repair-requested",
                            identity=f"repair|{body['metadata']['name']}", warning=False)
                continue
            try:
                self.api.create_repair_request(body)
            except ApiConflictError:
                pass  # created before (a restart): the hand-off stands
            except ApiError as exc:
                self._note_error("cannot create the repair request; will try again", exc, node=node)
                continue
            episode.requested = True
            self._enter(node, episode, "repair-requested", reason=ev.REASON_REPAIR_REQUESTED, now=now,
                        fingerprints=prints, why=f"Handed to repair: {repair.KIND} {body['metadata']['name']} (GPUs "
                        f"{', '.join(f'{i} ({u})' for u, i in sorted(gpus.items())) or 'none'}; evidence: "
                        f"{', '.join(sorted({a.name for a in alerts}))}).")

    def _validated(self, node: str, current: Marks, now: datetime) -> bool:
        """Re-admission gate: with ``validation`` set, the validation Job must have succeeded on the node."""
        validation = self.policy.validation
        if validation is None or not self.policy.changes_nodes:
            return True
        with self._lock:
            episode = self._episodes.setdefault(node, _Episode(since=current.last_transition or now))
        if episode.validated:
            return True
        prints = _fingerprints(current)
        if not episode.job:
            episode.attempt += 1
            body = repair.validation_job(node, episode.since, validation)
            body["metadata"]["name"] = f"{body['metadata']['name'][:58]}-{episode.attempt}"
            with contextlib.suppress(ApiConflictError):
                self.api.create_job(validation.namespace, body)
            episode.job = body["metadata"]["name"]
            self._enter(node, episode, "validating", reason=ev.REASON_VALIDATING, now=now, fingerprints=prints,
                        why=f"The alerts resolved and the hold passed; validating before re-admission: Job "
                        f"{validation.namespace}/{episode.job} ({validation.image}) on the node.")
            return False
        outcome = repair.job_outcome(self.api.get_job(validation.namespace, episode.job))
        if outcome == "running":
            return False
        if outcome == "succeeded":
            episode.validated = True
            self._audit(node, "", ev.REASON_VALIDATED, f"Validation Job {validation.namespace}/{episode.job} "
                        "succeeded: re-admitting the node.", now, fingerprints=prints, state="validating",
                        identity=f"validated|{episode.job}", warning=False)
            return True
        job, episode.job = episode.job, ""
        with self._lock:
            work = self._work.get(node)
            if work is not None:
                work.clears.clear()  # stays out until its alerts resolve again (or a person clears it)
                if work.empty():
                    del self._work[node]
        self._enter(node, episode, "repair-requested", reason=ev.REASON_VALIDATION_FAILED, now=now,
                    fingerprints=prints, warning=True,
                    why=f"Validation Job {validation.namespace}/{job} failed: the node stays quarantined; "
                    "repair it, then resolve or clear its alerts to validate again.")
        return False

    def _evict(self, node: str, drain: _Drain, decision: drains.PodDecision, now: datetime) -> None:
        key = (decision.namespace, decision.name)
        backoff, not_before = drain.backoff.get(key, (None, now))
        if now < not_before:
            return
        try:
            self.api.evict_pod(*key)
        except ApiError as exc:
            if exc.status == 404:
                return  # gone already
            if exc.status != 429:
                self._note_error("cannot evict a pod; will try again", exc, node=node, pod="/".join(key))
                self.metrics.count("evict", "failed")
                return
            backoff = backoff or DrainBackoff(EVICTION_BACKOFF)
            delay = backoff.failed(now.timestamp())
            drain.backoff[key] = (backoff, now + timedelta(seconds=delay))
            self.metrics.count("evict", "deferred")
            log.info("eviction refused by a PodDisruptionBudget; trying again later", extra={"fields": {
                "node": node, "pod": "/".join(key), "retry_in_s": round(delay, 1), "attempt": backoff.failures}})
            return
        drain.backoff.pop(key, None)
        self.metrics.count("evict", "applied")
        self._note_ok()
        pod = ev.PodRef(*key)
        message = (f"Evicted by gpu-pod-exporter remediate: the GPU it used on node {node} is unhealthy "
                   f"({decision.why}).")
        log.warning("remediation transition", extra={"fields": {
            "node": node, "event": ev.REASON_EVICTED, "state": "draining", "pod": str(pod),
            "fingerprints": ",".join(sorted(drain.fingerprints)), "why": message}})
        self._post(*ev.pod_event(pod, ev.REASON_EVICTED, message, now, identity=f"evict|{rfc3339(drain.started)}",
                                 instance=self.instance))

    def _desired(self, obj: Mapping[str, Any], current: Marks, marks: Mapping[str, GpuMark],
                 due: Mapping[str, set[str]]) -> Marks:
        desired = current
        for uuid, mark in marks.items():
            existing = desired.gpus.get(uuid)
            alerts = {**(existing.alerts if existing else {}), **mark.alerts}
            desired = desired.with_gpu(mark_for(self.policy, uuid, mark.gpu or (existing.gpu if existing else ""),
                                                alerts, existing.since if existing else mark.since,
                                                devices=existing.devices if existing else mark.devices))
        for uuid, fingerprints in due.items():
            existing = desired.gpus.get(uuid)
            if existing is None or not fingerprints:
                continue
            remaining = {fp: name for fp, name in existing.alerts.items() if fp not in fingerprints}
            desired = desired.with_gpu(mark_for(self.policy, uuid, existing.gpu, remaining, existing.since,
                                                devices=existing.devices)) \
                if remaining else desired.without_gpu(uuid)
        unschedulable = bool(obj.get("spec", {}).get("unschedulable"))
        cordoned = desired.wants_cordon and (current.cordoned_by_us or not unschedulable)
        return replace(desired, cordoned_by_us=cordoned)

    def _check_limits(self, node: str, now: datetime, restricting: bool, last: datetime | None) -> Verdict:
        tainted_after = gpu_nodes = 0
        if restricting and self.breaker.is_open:  # latched: no need to count the nodes
            return self.breaker.check(node, now, restricting=True, last_transition=None, tainted_after=0,
                                      gpu_nodes=0)
        if restricting:
            nodes = self.api.list_nodes()
            gpu_node_names = {n["metadata"]["name"] for n in nodes if has_gpus(n, self.policy.limits.gpu_resources)}
            gpu_nodes = len(gpu_node_names | self._dra_gpu_nodes())
            restricted = {n["metadata"]["name"] for n in nodes if restricted_by_us(n)}
            restricted |= {name for name, marks in self._shadow.items() if marks.restricts}
            tainted_after = len(restricted - {node}) + 1
        return self.breaker.check(node, now, restricting=restricting, last_transition=last,
                                  tainted_after=tainted_after, gpu_nodes=gpu_nodes)

    def _hold(self, node: str, obj: Mapping[str, Any], verdict: Verdict, desired: Marks, now: datetime) -> None:
        action = "taint" if desired.taint_effect else "untaint"
        result = "deferred" if verdict.limit == "cooldown" else "suppressed"
        with self._lock:
            work = self._work.get(node)
            if work is None:
                return
            first = work.held != verdict.limit
            work.held = verdict.limit
            work.retry_at = min(verdict.retry_at or now + self.recheck, now + self.recheck) \
                if verdict.limit != "cooldown" else (verdict.retry_at or now + self.recheck)
            if verdict.limit == "max_nodes_per_hour" and desired.restricts:
                work.retry_at = now + LATCHED  # nothing to try until a person closes the breaker (or it resolves)
        uid = obj.get("metadata", {}).get("uid", "")
        if verdict.limit == "max_nodes_per_hour" and desired.restricts and self.breaker.trip(now, verdict.reason):
            self._audit(node, uid, ev.REASON_BREAKER_OPEN,
                        f"Circuit breaker opened: {verdict.reason}. No node gains a taint or cordon until a person "
                        "closes it (POST /breaker/close); changes whose alerts resolve meanwhile are dropped.",
                        now, fingerprints=_fingerprints(desired), state="breaker-open",
                        identity=f"open|{rfc3339(now)}")
        if not first:
            return
        self.metrics.count(action, result)
        what = self._describe_change(desired)
        reason = ev.REASON_DEFERRED if verdict.limit == "cooldown" else ev.REASON_SUPPRESSED
        self._audit(node, uid, reason, f"Not done yet: {what}. Held back by {verdict.reason}; it is tried again "
                    "when the limit allows, and dropped if its alerts resolve first.", now,
                    fingerprints=_fingerprints(desired), state="held",
                    identity=f"{verdict.limit}|{desired.state_json()}")

    def _apply(self, node: str, obj: Mapping[str, Any], current: Marks, desired: Marks, now: datetime, *,
               transition: bool, restricting: bool) -> bool:
        """Make (or, outside enforce, report) the change; True when there was one."""
        uid = obj.get("metadata", {}).get("uid", "")
        if not self.policy.changes_nodes:
            if desired == current:
                return False
            rules = dt.describe(dt.rule_changes(self._rule_bodies(node, current), self._rule_bodies(node, desired)))
            shadow_obj = {**obj, "spec": {**obj.get("spec", {}), "taints": [
                t for t in obj.get("spec", {}).get("taints") or [] if t.get("key") != TAINT_KEY]}}
            what = self._describe_change(desired, shadow=current) + (f", {rules}" if rules else "")
            self._shadow[node] = desired
            self._count_actions(current, desired, shadow_obj, "dry_run")
            self._audit(node, uid, ev.REASON_DRY_RUN,
                        f"Mode {self.policy.mode}: would {what}. Nothing was changed on the node.", now,
                        fingerprints=_fingerprints(desired, current), state=_state(desired),
                        identity=desired.state_json(), warning=False)
            return True
        rules = self._write_rules(node, current, desired)  # first: the node's marks say what they quarantine
        patch = node_patch(obj, current, desired)
        status = condition_patch(obj, desired, now)
        if patch is None and status is None and not rules:
            return False
        if patch is not None:
            self.api.patch_node(node, patch)  # ApiConflictError propagates: read again, decide again
        if status is not None:
            self.api.patch_node_status(node, status)
        self._count_actions(current, desired, obj, "applied")
        what = self._describe_change(desired, shadow=current, obj=obj) + (f", {rules}" if rules else "")
        if transition or (patch is not None and "spec" in patch) or rules:
            reason = ev.REASON_TAINTED if restricting else ev.REASON_UNTAINTED
            self._audit(node, uid, reason, f"gpu-pod-exporter remediate: {what}.", now,
                        fingerprints=_fingerprints(desired, current), state=_state(desired),
                        identity=desired.state_json(), warning=restricting)
        else:
            log.info(f"node changed: {what}", extra={"fields": {
                "node": node, "fingerprints": ",".join(_fingerprints(desired, current))}})
        return True

    # -- per-GPU quarantine on DRA nodes (exporter/remediate/devicetaints.py) ------------------------

    def _device_rules_served(self) -> str | None:
        """The resource.k8s.io version serving DeviceTaintRules, asked once; None: node taints only."""
        if not self._rule_version_known:
            self._rule_version = self.api.device_taint_rule_version(dt.VERSIONS)
            self._rule_version_known = True
            if self._rule_version is None:
                log.warning("device_taints is on but the API server serves no DeviceTaintRule (Kubernetes 1.36: "
                            "--runtime-config resource.k8s.io/v1beta2/devicetaintrules=true and the "
                            "DRADeviceTaintRules feature gate); GPUs are quarantined by node taints")
            else:
                log.info("DRA GPUs are quarantined by DeviceTaintRules", extra={"fields": {
                    "api": f"{dt.GROUP}/{self._rule_version}"}})
        return self._rule_version

    def _with_devices(self, node: str, desired: Marks) -> Marks:
        """Look up, once per GPU, the DRA devices of newly tainted GPUs; a GPU without any keeps the node taint."""
        if not self.policy.device_taints:
            return desired
        todo = [mark for mark in desired.gpus.values()
                if mark.taint_effect and not mark.devices and mark.uuid != NODE_LEVEL]
        if not todo or self._device_rules_served() is None:
            return desired
        slices = self._slices(node)
        for mark in todo:
            devices = dt.devices_of_gpu(slices, node, mark.uuid)
            if devices:
                desired = desired.with_gpu(replace(mark, devices=devices))
        return desired

    def _dra_gpu_nodes(self) -> set[str]:
        """Nodes whose GPUs are published through DRA (they have no nvidia.com/gpu allocatable), so that the
        share limit counts them as GPU nodes; none unless device_taints is on and the rules are served."""
        if not self.policy.device_taints or self._device_rules_served() is None:
            return set()
        return {node for node in (str((item.get("spec") or {}).get("nodeName") or "")
                                  for item in self._slices(None) if dt.publishes_gpus(item)) if node}

    def _slices(self, node: str | None) -> list[dict[str, Any]]:
        """ResourceSlices (of ``node``, or all); none when the remediator may not read them (403, 404), so that
        a missing RBAC rule leaves the GPU to the node taint rather than in service. Transient errors raise:
        the node's change waits for the next pass."""
        try:
            return self.api.list_resource_slices(node)
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            self._states.once(("slices", exc.status), logging.WARNING,
                              "cannot read ResourceSlices (the chart grants it with remediation.deviceTaints); "
                              "GPUs are quarantined by node taints", error=str(exc))
            return []

    def _drained(self, node: str) -> bool:
        with self._lock:
            drain = self._drains.get(node)
            return drain is not None and drain.done

    def _rule_bodies(self, node: str, marks: Marks) -> list[dict[str, Any]]:
        version = self._rule_version or dt.VERSIONS[0]
        drained = self._drained(node)
        return [dt.rule_body(version, node, mark.uuid, mark.gpu, device,
                             effect=dt.device_effect(mark.taint_effect or "NoSchedule",
                                              drain_configured=self.policy.drain is not None, drained=drained))
                for mark in marks.device_marks for device in mark.devices]

    def _write_rules(self, node: str, current: Marks, desired: Marks) -> str:
        """Make the node's DeviceTaintRules those of ``desired``; what was done ("" when nothing)."""
        if not (current.device_marks or desired.device_marks) or self._device_rules_served() is None:
            return ""
        version = str(self._rule_version)
        existing = [rule for rule in self.api.list_device_taint_rules(version, f"{dt.MANAGED_BY[0]}={dt.MANAGED_BY[1]}")
                    if (rule.get("metadata", {}).get("annotations") or {}).get(dt.NODE_LABEL) == node]
        changes = dt.rule_changes(existing, self._rule_bodies(node, desired))
        for body in changes.apply:
            self.api.apply_device_taint_rule(version, body)
            self.metrics.count("taint", "applied")
        for name in changes.delete:
            self.api.delete_device_taint_rule(version, name)
            self.metrics.count("untaint", "applied")
        return dt.describe(changes)

    def _rules_after_drain(self, node: str) -> None:
        """The drain is done: rules whose policy asks NoExecute get it now (nothing is left for it to delete)."""
        if not self.policy.device_taints or not self.policy.changes_nodes:
            return
        try:
            marks = read_marks(self.api.get_node(node))
            done = self._write_rules(node, marks, marks)
        except ApiError as exc:
            self._note_error("cannot update the node's DeviceTaintRules after the drain", exc, node=node)
            return
        if done:
            log.info("remediation transition", extra={"fields": {"node": node, "event": "DeviceTaintRules",
                                                                 "state": "drained", "why": done}})

    def _count_actions(self, current: Marks, desired: Marks, obj: Mapping[str, Any], result: str) -> None:
        had_taint = our_taint(obj) is not None or current.taint_effect is not None
        if desired.taint_effect and (not had_taint or current.taint_value() != desired.taint_value()
                                     or current.taint_effect != desired.taint_effect):
            self.metrics.count("taint", result)
        elif not desired.taint_effect and had_taint:
            self.metrics.count("untaint", result)
        if desired.cordoned_by_us and not current.cordoned_by_us:
            self.metrics.count("cordon", result)
        elif current.cordoned_by_us and not desired.cordoned_by_us:
            self.metrics.count("uncordon", result)
        if {u for u, m in desired.gpus.items() if m.annotate} != {u for u, m in current.gpus.items() if m.annotate}:
            self.metrics.count("annotate", result)
        if {u for u, m in desired.gpus.items() if m.condition} != {u for u, m in current.gpus.items() if m.condition}:
            self.metrics.count("condition", result)

    def _describe_change(self, desired: Marks, shadow: Marks | None = None,
                         obj: Mapping[str, Any] | None = None) -> str:
        parts: list[str] = []
        if desired.taint_effect:
            parts.append(f"taint {TAINT_KEY}={desired.taint_value()}:{desired.taint_effect}")
        elif (shadow is not None and shadow.taint_effect) or (obj is not None and our_taint(obj)):
            parts.append(f"remove the taint {TAINT_KEY}")
        if desired.cordoned_by_us and not (shadow and shadow.cordoned_by_us):
            parts.append("cordon the node")
        elif shadow is not None and shadow.cordoned_by_us and not desired.cordoned_by_us:
            parts.append("uncordon the node")
        gpus = "; ".join(f"GPU {mark.gpu} ({uuid}): {', '.join(sorted(set(mark.alerts.values())))}"
                         for uuid, mark in sorted(desired.gpus.items()))
        cleared = sorted(set(shadow.gpus) - set(desired.gpus)) if shadow is not None else []
        if gpus:
            parts.append(f"mark unhealthy {gpus}")
        if cleared:
            parts.append(f"clear {', '.join(cleared)} (alerts resolved and the hold passed)")
        return ", ".join(parts) or "no change"

    # -- reporting ------------------------------------------------------------------------------

    def _publish(self) -> None:
        with self._lock:
            held = [work.held for work in self._work.values() if work.held]
        for limit in ("cooldown", "max_nodes_per_hour", "max_tainted_percent"):
            self.metrics.held.labels(limit).set(held.count(limit))
        self.metrics.breaker_open.set(1 if self.breaker.is_open or any(limit != "cooldown" for limit in held) else 0)
        marked = {name for name, marks in self._shadow.items() if marks.gpus} if not self.policy.changes_nodes \
            else self._marked
        self.metrics.marked_nodes.set(len(marked))

    def close_breaker(self, who: str = "") -> bool:
        """A person closes the latched breaker; held changes whose alerts still fire are decided again at once."""
        with self._lock:
            was_open = self.breaker.close()
            if was_open:
                for work in self._work.values():
                    if work.held == "max_nodes_per_hour":
                        work.retry_at = None
                        work.held = ""
                self._lock.notify_all()
        if was_open:
            log.warning("circuit breaker closed by a person", extra={"fields": {"by": who or "unknown"}})
        return was_open

    def _note_ok(self) -> None:
        """An API call worked: if the last one had failed, say once that it works again."""
        if self.last_error:
            self.last_error = ""
            self._states.change("api", "ok", logging.INFO, "Kubernetes API calls work again")

    def _note_error(self, message: str, exc: ApiError, **fields: Any) -> None:
        self.last_error = f"{message}: {exc}"
        self._states.change("api", str(exc.status), logging.ERROR, message, error=str(exc), **fields)

    def health(self) -> tuple[bool, str]:
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return False, "the remediation worker stopped"
        with self._lock:
            pending = len(self._work)
        state = "synced" if self._synced else "waiting for the Kubernetes API"
        return True, f"ok: mode {self.policy.mode}, {state}, {pending} nodes with pending changes"
