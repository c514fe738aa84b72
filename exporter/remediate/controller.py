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

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from exporter.logs import StateLog, get_logger
from exporter.metrics.hostname_label import node_name
from exporter.remediate import events as ev
from exporter.remediate.alerts import Alert, Notification
from exporter.remediate.breaker import Breaker, Verdict
from exporter.remediate.kubeapi import ApiConflictError, ApiError, KubeApi
from exporter.remediate.nodestate import (
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
CONFLICT_RETRIES = 5
EVENT_ATTEMPTS = 3
RETRY_AFTER_FAILURE = timedelta(seconds=30)
SEEN_LIMIT = 100_000
SEEN_TTL = timedelta(days=7)

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


def mark_for(policy: Policy, uuid: str, gpu: str, alerts: Mapping[str, str], since: str) -> GpuMark:
    """A GPU's mark from the alerts that hold it (fingerprint -> name) and what their policies ask."""
    policies = [p for p in (policy.for_alert(name) for name in alerts.values()) if p is not None]
    effects = [p.taint_effect for p in policies if p.does("taint")]
    strongest = max(effects, key=("PreferNoSchedule", "NoSchedule", "NoExecute").index) if effects else None
    return GpuMark(uuid=uuid, gpu=gpu, alerts=MappingProxyType(dict(alerts)), since=since, taint_effect=strongest,
                   cordon=any(p.does("cordon") for p in policies),
                   annotate=any(p.does("annotate") for p in policies),
                   condition=any(p.does("condition") for p in policies))


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

    def _record(self, alert: Alert, now: datetime) -> str:
        policy = self.policy.for_alert(alert.name)
        if policy is None:
            return "ignored"
        node = node_name(alert.labels, self.policy.node_label)  # Hostname or 4.8.3's hostname
        uuid = alert.labels.get("UUID", "")
        if not node or not uuid:
            self._states.once(("unusable", alert.name), logging.WARNING,
                              f"alert without the {self.policy.node_label} or UUID label: cannot tell which GPU "
                              "of which node it is about; ignored", alert=alert.name)
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
                work.marks[uuid] = mark_for(self.policy, uuid, alert.labels.get("gpu", ""), alerts,
                                            previous.since if previous else rfc3339(alert.starts_at))
            if policy.does("event") and self.policy.mode != "dry-run":
                self._contexts.append(_Context(node, uuid, alert))
            log.info("alert firing", extra={"fields": {
                "alert": alert.name, "node": node, "gpu": alert.labels.get("gpu"), "uuid": uuid,
                "xid": alert.labels.get("xid", "")}})
        else:
            firing.pop(alert.fingerprint, None)
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
        now = self.clock()
        with self._lock:
            due = [node for node, work in self._work.items() if (when := work.next_due()) is not None and when <= now]
            due.sort(key=lambda node: bool(self._work[node].marks))  # clears first: they make room under the limits
        for node in due:
            if self._stop.is_set():
                break
            self._record_contexts()  # alerts that arrived meanwhile are explained before nodes change
            self._reconcile(node)
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
            marks = read_marks(node)
            if marks.last_transition is not None:
                self._transitions[name] = marks.last_transition
                if now - marks.last_transition < timedelta(hours=1):
                    self.breaker.record(name, marks.last_transition)
            if marks.gpus and self.policy.changes_nodes:
                self._marked.add(name)
        self._synced = True
        self._states.change("api", "ok", logging.INFO, "Kubernetes API reachable; earlier remediations loaded",
                            nodes=len(nodes), marked=len(self._marked))

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
        message = ev.alert_context(alert.labels, alert.annotations, pods)
        self._post(*ev.node_event(context.node, "", alert.name, message, now, identity=alert.occurrence,
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
        with self._lock:
            work = self._work.get(node)
            if work is None:
                return
            marks = dict(work.marks)
            due = {uuid: {fp for fp, when in clears.items() if when <= now} for uuid, clears in work.clears.items()}
        enforce = self.policy.changes_nodes
        current = read_marks(obj) if enforce else \
            self._shadow.get(node, Marks(last_transition=self._transitions.get(node)))
        desired = self._desired(obj, current, marks, due)
        before = restricted_by_us(obj) if enforce else current.restricts
        after = desired.restricts
        transition = before != after
        if transition:
            if not self._synced:
                raise ApiError(0, "earlier remediations not loaded yet")
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
        if not changed:
            self.metrics.count("taint" if desired.taint_effect else "annotate", "unchanged")

    def _desired(self, obj: Mapping[str, Any], current: Marks, marks: Mapping[str, GpuMark],
                 due: Mapping[str, set[str]]) -> Marks:
        desired = current
        for uuid, mark in marks.items():
            existing = desired.gpus.get(uuid)
            alerts = {**(existing.alerts if existing else {}), **mark.alerts}
            desired = desired.with_gpu(mark_for(self.policy, uuid, mark.gpu or (existing.gpu if existing else ""),
                                                alerts, existing.since if existing else mark.since))
        for uuid, fingerprints in due.items():
            existing = desired.gpus.get(uuid)
            if existing is None or not fingerprints:
                continue
            remaining = {fp: name for fp, name in existing.alerts.items() if fp not in fingerprints}
            desired = desired.with_gpu(mark_for(self.policy, uuid, existing.gpu, remaining, existing.since)) \
                if remaining else desired.without_gpu(uuid)
        unschedulable = bool(obj.get("spec", {}).get("unschedulable"))
        cordoned = desired.wants_cordon and (current.cordoned_by_us or not unschedulable)
        return replace(desired, cordoned_by_us=cordoned)

    def _check_limits(self, node: str, now: datetime, restricting: bool, last: datetime | None) -> Verdict:
        tainted_after = gpu_nodes = 0
        if restricting:
            nodes = self.api.list_nodes()
            gpu_nodes = sum(1 for n in nodes if has_gpus(n, self.policy.limits.gpu_resources))
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
        if not first:
            return
        self.metrics.count(action, result)
        what = self._describe_change(desired)
        reason = ev.REASON_DEFERRED if verdict.limit == "cooldown" else ev.REASON_SUPPRESSED
        log.warning("node change held back", extra={"fields": {"node": node, "limit": verdict.limit,
                                                               "reason": verdict.reason, "change": what}})
        self._post(*ev.node_event(node, obj.get("metadata", {}).get("uid", ""), reason,
                                  f"Not done yet: {what}. Held back by {verdict.reason}; "
                                  "it is tried again when the limit allows.", now,
                                  identity=f"{verdict.limit}|{desired.state_json()}", instance=self.instance))

    def _apply(self, node: str, obj: Mapping[str, Any], current: Marks, desired: Marks, now: datetime, *,
               transition: bool, restricting: bool) -> bool:
        """Make (or, outside enforce, report) the change; True when there was one."""
        uid = obj.get("metadata", {}).get("uid", "")
        if not self.policy.changes_nodes:
            if desired == current:
                return False
            shadow_obj = {**obj, "spec": {**obj.get("spec", {}), "taints": [
                t for t in obj.get("spec", {}).get("taints") or [] if t.get("key") != TAINT_KEY]}}
            what = self._describe_change(desired, shadow=current)
            self._shadow[node] = desired
            self._count_actions(current, desired, shadow_obj, "dry_run")
            log.info(f"{self.policy.mode}: would {what}", extra={"fields": {"node": node}})
            self._post(*ev.node_event(node, uid, ev.REASON_DRY_RUN,
                                      f"Mode {self.policy.mode}: would {what}. Nothing was changed on the node.",
                                      now, identity=desired.state_json(), warning=False, instance=self.instance))
            return True
        patch = node_patch(obj, current, desired)
        status = condition_patch(obj, desired, now)
        if patch is None and status is None:
            return False
        if patch is not None:
            self.api.patch_node(node, patch)  # ApiConflictError propagates: read again, decide again
        if status is not None:
            self.api.patch_node_status(node, status)
        self._count_actions(current, desired, obj, "applied")
        what = self._describe_change(desired, shadow=current, obj=obj)
        log.info(f"node changed: {what}", extra={"fields": {"node": node}})
        if transition or (patch is not None and "spec" in patch):
            reason = ev.REASON_TAINTED if restricting else ev.REASON_UNTAINTED
            self._post(*ev.node_event(node, uid, reason, f"gpu-pod-exporter remediate: {what}.", now,
                                      identity=desired.state_json(), warning=restricting, instance=self.instance))
        return True

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
        self.metrics.breaker_open.set(1 if any(limit != "cooldown" for limit in held) else 0)
        marked = {name for name, marks in self._shadow.items() if marks.gpus} if not self.policy.changes_nodes \
            else self._marked
        self.metrics.marked_nodes.set(len(marked))

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
