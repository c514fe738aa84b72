"""Mirroring a Kubernetes resource: list, then watch, forever, as a polite member of a large fleet.

One mechanism for every resource the exporter follows (pods on this node, namespaces, and whatever
comes next, e.g. resource.k8s.io ResourceSlices): a ``Reflector`` is given a ``WatchedResource``
(API path, field and label selector), a ``Decoder`` (what to do with a full list and with each
event) and an API transport (``exporter.kube.apiserver``), and does the rest. It behaves like
client-go's reflector, and better where a DaemonSet on thousands of nodes needs it:

* **list, then watch from the list's resourceVersion**, with ``allowWatchBookmarks=true``: bookmarks
  move the resourceVersion forward without objects, and a watch that ends is resumed from the last
  one, so ``410 Gone`` (the version fell out of the server's event window) stays rare;
* **lists come from the API server's watch cache**: the first list asks for ``resourceVersion=0``
  (any state the cache holds), a relist after ``410`` for the last synced version with
  ``resourceVersionMatch=NotOlderThan`` (still the cache, never older than what we had). Only when
  the server says it has not reached that version ("Too large resource version": its store was
  restored or reset, and versions start again lower) does the relist ask for a consistent read;
* **jittered watch timeouts**: each watch asks for ``timeoutSeconds`` drawn from
  ``[watch_s, 2 * watch_s)``, so nodes that reconnected together after an API server restart do not
  all reconnect together again five minutes later, and forever after;
* **backoff on every failure** (``exporter.backoff``: one attempt per window, full jitter,
  windows doubling from 1 s to 60 s): errors, 5xx, 429, timeouts, dropped connections, a 410 right
  after a relist, a watch the server ends long before its timeout. ``Retry-After`` is honoured. The
  window schedule is reset only after a watch has stayed open for ``backoff_reset_s``, so a server
  that accepts a watch and drops it a second later is paced like one that refuses it;
* **routine events are not failures**: a watch that ends at its timeout is resumed at once; a healthy
  watch that is cut (load-balancer idle timeout, one API server replica restarting) or answered
  with one 410 is resumed within the first window without a warning. Only when the same event
  happens again before a watch has proven itself (a 410 right after the relist that answered the
  last one) does it become a failure episode;
* **what it does is visible**: ``ApiCounters`` counts every request by resource, verb and HTTP code
  (``<error>`` when no answer came), every relist by reason (``initial``, ``expired``,
  ``too-large``, ``malformed``, ``stale``) and every bookmark received; ``ReflectorStatus`` says
  whether a watch is held now, the current failure episode, the retry count and the next delay.

``WatchGroup`` runs several reflectors over one API connection and turns their statuses into one
``ApiState`` (``up`` only while every watch is held: open, and proven by an event, a bookmark or
``watch_settle_s`` without an error, so a watch answered 410 at once never counts) and one log line
per change of state (the
first failure of an episode, with its retry count and next delay; the recovery), never one per
retry. When the API has been failing for ``stale_after_s``, it asks its owner to drop what it
mirrored (labels of pods long gone are more likely wrong than right) and relists on recovery.

Decoders see raw JSON (``Mapping``); whatever they raise (``ValueError``, ``TypeError``, ``KeyError``,
``AttributeError``) marks the answer as malformed: the resource is relisted after a pause, because
after a garbled event the mirror can no longer be trusted.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from exporter.backoff import Backoff, BackoffPolicy
from exporter.kube.apiserver import ApiError
from exporter.logs import get_logger
from exporter.supervisor import supervised

LOG = get_logger("kube.api")  # under the exporter's handler and format

DECODE_ERRORS = (ValueError, TypeError, AttributeError, KeyError)
NO_ANSWER = "<error>"  # the code label of a request that got no HTTP answer (as client-go's metrics say)
NORMAL_END_FRACTION = 0.9  # a watch the server ends after this share of its timeout ended normally


class ApiRequests(Protocol):
    """What a reflector needs from a transport (``exporter.kube.apiserver``): one authenticated GET.

    Returns the response unread (``status``, ``data``, ``stream()``, ``release_conn()``); raises the
    client's ``ApiError`` (``status``, ``reason``, ``retry_after``, ``body``) for a non-2xx answer.
    """

    def get(self, path: str, query: Sequence[tuple[str, str]], timeout: Any) -> Any: ...


class Decoder(Protocol):
    """Applies what the API sends to the mirror. Raising any of ``DECODE_ERRORS`` means "malformed"."""

    def replace(self, items: list[Mapping[str, Any]]) -> None:
        """A full list: the mirror becomes exactly these objects."""

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED event."""


@dataclass(frozen=True)
class WatchedResource:
    """A collection to mirror: ``name`` for metrics and logs, the API ``path``, server-side selectors.

    ``alternatives`` are the same collection under other API versions, tried in order when the server
    answers 404 for the current one (a cluster serving only ``resource.k8s.io/v1beta1``, say); after
    the last one the next attempt starts again from ``path``. ``rbac_hint`` and ``absent_hint`` end
    the log line of a 403 and of a 404 from every version.
    """

    name: str  # e.g. "pods"
    path: str  # e.g. "/api/v1/pods"
    field_selector: str = ""  # e.g. "spec.nodeName=node-a": the node's own share, never the cluster
    label_selector: str = ""
    alternatives: tuple[str, ...] = ()  # e.g. "/apis/resource.k8s.io/v1beta2/resourceslices"
    rbac_hint: str = "list/watch pods and namespaces"
    absent_hint: str = ""

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.alternatives)


@dataclass(frozen=True)
class WatchTimeouts:
    """Timeouts and backoff of the API streams (seconds). Tests shrink them; the defaults are for a fleet."""

    connect_s: float = 5.0
    list_read_s: float = 30.0
    watch_s: int = 300  # shortest server-side timeoutSeconds; each watch draws from [watch_s, 2 * watch_s)
    watch_read_slack_s: float = 30.0  # read timeout = timeoutSeconds + slack: a silent hung stream errors out
    backoff_initial_s: float = 1.0  # the first retry window
    backoff_max_s: float = 60.0  # the longest retry window: at most one attempt per minute per resource
    backoff_reset_s: float = 120.0  # a watch held this long ends a failure streak (client-go: 2 min)
    watch_settle_s: float = 5.0  # a watch open this long without an error counts as held (kube_api_up)
    retry_after_max_s: float = 600.0  # a longer Retry-After is cut to this
    stale_after_s: float = 300.0  # API failing this long: forget what was mirrored

    def backoff_policy(self) -> BackoffPolicy:
        return BackoffPolicy(initial_s=self.backoff_initial_s, max_s=self.backoff_max_s,
                             retry_after_max_s=self.retry_after_max_s)


@dataclass(frozen=True)
class Failure:
    """Why an attempt failed. ``kind`` is stable per cause (it decides whether a state changed)."""

    kind: str  # "http-500", "http-429", "timeout", "unreachable", "gone", "too-large", "malformed", "cut", ...
    message: str
    soft: bool = False  # routine once (cut stream, one 410): a failure only when the next attempt fails too
    relist: str | None = None  # relist reason when the resourceVersion is unusable ("expired", ...)
    retry_after: float | None = None  # the server's Retry-After, seconds


@dataclass(frozen=True)
class ReflectorStatus:
    """One reflector's condition, replaced as a whole on every change."""

    resource: str
    held: bool = False  # a watch stream is open now
    synced: bool = False  # a list succeeded at least once
    settled: bool = False  # the open watch follows a healthy one, or delivered a line, or lasted watch_settle_s
    episode: Failure | None = None  # the failure streak in progress (None: healthy or routine resume)
    episode_since: float | None = None  # monotonic time the episode began
    retries: int = 0  # consecutive failed attempts (the backoff window number)
    next_delay_s: float = 0.0  # until the next attempt, as decided after the last failure
    last_success_wall: float = 0.0
    last_success_monotonic: float | None = None


@dataclass(frozen=True)
class ApiState:
    """Health of the API side, for self-metrics and /health. Same shape as the kubelet's.

    ``up`` is true only while every watch of the group is held (open and proven, see
    ``ReflectorStatus.settled``): a relist loop that never keeps a watch open is down, however many
    of its lists succeed.
    """

    up: bool = False
    error: str = "not started"
    error_kind: str = "not-started"
    last_success_wall: float = 0.0
    last_success_monotonic: float | None = None
    retries: int = 0

    @property
    def condition(self) -> tuple[bool, str]:
        return self.up, self.error_kind


class ApiCounters:
    """Requests by (resource, verb, code), relists by (resource, reason) and watch bookmarks by
    resource since start. Thread-safe.

    Bookmarks are counted because they are what keeps a resumed watch from relisting: a node's pod
    watch sees few events of its own, and without bookmarks it would resume from the version of its
    last event, which the API server may have forgotten (410, then a relist). A count that stays 0
    while watches are held means something between here and the API server drops them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = {}
        self._relists: dict[tuple[str, str], int] = {}
        self._bookmarks: dict[str, int] = {}

    def request(self, resource: str, verb: str, code: str) -> None:
        with self._lock:
            key = (resource, verb, code)
            self._requests[key] = self._requests.get(key, 0) + 1

    def relist(self, resource: str, reason: str) -> None:
        with self._lock:
            key = (resource, reason)
            self._relists[key] = self._relists.get(key, 0) + 1

    def watching(self, resource: str) -> None:
        """Start ``resource``'s bookmark count at 0, so its series exists from the first scrape: a
        counter that only appears with its first bookmark (a minute or more later on a real API
        server) has no ``rate()`` until then, and the set of series would depend on when one looks."""
        with self._lock:
            self._bookmarks.setdefault(resource, 0)

    def bookmark(self, resource: str) -> None:
        with self._lock:
            self._bookmarks[resource] = self._bookmarks.get(resource, 0) + 1

    def bookmarks(self) -> tuple[tuple[str, int], ...]:
        with self._lock:
            return tuple(sorted(self._bookmarks.items()))

    def requests(self) -> tuple[tuple[tuple[str, str, str], int], ...]:
        with self._lock:
            return tuple(sorted(self._requests.items()))

    def relists(self) -> tuple[tuple[tuple[str, str], int], ...]:
        with self._lock:
            return tuple(sorted(self._relists.items()))


class _Gone(Exception):  # noqa: N818 - named after the HTTP status it stands for
    """The resourceVersion is too old: relist."""


class _Malformed(Exception):  # noqa: N818
    """The server sent something that is not the JSON we expect: relist after a pause."""


class _StreamCut(Exception):  # noqa: N818
    """An established watch stream was cut (API server restart, load-balancer idle timeout)."""


class _WatchError(Exception):
    """An ERROR event other than 410 inside a watch stream."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(f"watch error {code}: {message}")
        self.status = code if isinstance(code, int) else None


def classify(resource: str, exc: BaseException, rbac_hint: str = "list/watch pods and namespaces") -> Failure:
    """What an exception of a list or watch means: its stable kind, one readable line, what to do."""
    if isinstance(exc, _Gone):
        return Failure("gone", f"Kubernetes API: {resource} resourceVersion expired (410 Gone); relisting",
                       soft=True, relist="expired")
    if isinstance(exc, _Malformed):
        return Failure("malformed", f"Kubernetes API sent malformed data: {exc}", relist="malformed")
    if isinstance(exc, _StreamCut):
        return Failure("cut", f"Kubernetes API cut the {resource} watch ({exc})", soft=True)
    if isinstance(exc, _WatchError):
        return Failure(f"watch-error-{exc.status or 'unknown'}", f"Kubernetes API {resource} {exc}")
    if isinstance(exc, ApiError) and exc.status:
        return _answered(resource, exc, rbac_hint)
    return _unanswered(resource, exc)


def _answered(resource: str, exc: ApiError, rbac_hint: str) -> Failure:
    """A non-2xx answer of the API server (the client's ``ApiError``)."""
    status, retry_after = exc.status, exc.retry_after
    text = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else str(exc.body)
    if status == 410:
        return Failure("gone", f"Kubernetes API: {resource} resourceVersion expired (410 Gone); relisting",
                       soft=True, relist="expired", retry_after=retry_after)
    if status == 504 and "too large resource version" in text.lower():
        return Failure("too-large", f"Kubernetes API has not reached the {resource} resourceVersion we hold "
                       "(its store was restored or reset); relisting with a consistent read",
                       soft=True, relist="too-large", retry_after=retry_after)
    hint = ""
    if status in (401, 403):
        hint = f" (check the service account's RBAC: {rbac_hint})"
    elif status == 429:
        hint = " (API Priority and Fairness or max-inflight limit)"
    after = f", Retry-After {retry_after:g} s" if retry_after is not None else ""
    return Failure(f"http-{status}", f"Kubernetes API answered {status} {exc.reason} to {resource} list/watch"
                   f"{hint}{after}", retry_after=retry_after)


def _unanswered(resource: str, exc: BaseException) -> Failure:
    """No answer: a timeout, an unreachable server, or anything else the transport raised."""
    name = type(exc).__name__
    text = str(exc)
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in name.lower():
        return Failure("timeout", f"Kubernetes API timed out on {resource} list/watch: {name}")
    if any(word in lowered for word in ("refused", "reset by peer", "connection aborted", "no route",
                                        "remote end closed")) \
            or "NewConnectionError" in name or "MaxRetryError" in name or "ProtocolError" in name:
        return Failure("unreachable", f"Kubernetes API unreachable ({resource}): {text[:200]}")
    return Failure(name, f"Kubernetes API {resource} list/watch failed: {name}: {text[:200]}")


def describe_api_error(resource: str, exc: BaseException) -> tuple[str, str]:
    """``classify`` as (kind, one readable line), for callers that only report (``gpu-pod-exporter doctor``)."""
    failure = classify(resource, exc)
    return failure.kind, failure.message


class Reflector:
    """List, then watch, one resource forever on its own thread (see the module docstring)."""

    def __init__(
        self,
        resource: WatchedResource,
        api: ApiRequests,
        decoder: Decoder,
        *,
        timeouts: WatchTimeouts,
        counters: ApiCounters,
        on_status: Callable[[Reflector], None] = lambda reflector: None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        random_fraction: Callable[[], float] = random.random,
        thread_name: str = "",
    ) -> None:
        self.resource = resource
        self._api = api
        self._decoder = decoder
        self._timeouts = timeouts
        self._counters = counters
        self._on_status = on_status
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._random = random_fraction
        self.backoff = Backoff(timeouts.backoff_policy(), random_fraction)
        self._stop = threading.Event()
        self._relist = threading.Event()
        self._response: Any = None
        self._status = ReflectorStatus(resource.name)
        self._status_lock = threading.Lock()
        self._resource_version: str | None = None
        self._synced_version = ""  # the resourceVersion of the last good list or event
        self._list_from = "cache"  # cache: resourceVersion=0 | not-older: the synced version | consistent
        self._failed_since_settled = False  # a failure happened and no watch has delivered anything since
        self._last_failure_kind = ""
        self._watch_serial = 0
        self._open_watch: int | None = None  # serial of the watch held now
        self._path_index = 0  # which of resource.paths is in use (another API version after a 404)
        self._paths_logged: set[int] = set()  # switches to an alternative already logged (once each)
        self._thread = supervised(self._run, name=thread_name or f"kube-watch-{resource.name}", stop=self._stop)
        self.lists = 0  # successful lists, for tests
        self.watches = 0  # watch requests answered 200, for tests

    @property
    def status(self) -> ReflectorStatus:
        return self._status

    @property
    def path(self) -> str:
        """The API path in use: ``resource.path``, or an alternative the server did serve."""
        return self.resource.paths[self._path_index]

    def start(self) -> None:
        self._counters.relist(self.resource.name, "initial")
        self._counters.watching(self.resource.name)
        self._thread.start()

    def request_relist(self) -> None:
        """Start over with a list at the next attempt (the mirror was cleared behind our back)."""
        self._relist.set()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            _abort_response(response)

    def join(self, timeout_s: float) -> None:
        if self._thread.ident is not None:  # started
            self._thread.join(timeout_s)

    # -- the loop -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._relist.is_set():
                self._relist.clear()
                if self._resource_version is not None:
                    self._resource_version = None
                    self._counters.relist(self.resource.name, "stale")
            try:
                if self._resource_version is None:
                    self._list()
                ended_normally = self._watch()
            except Exception as exc:  # noqa: BLE001 - every failure of a request is classified and paced
                if self._stop.is_set():
                    return
                failure = classify(self.resource.name, exc, self.resource.rbac_hint)
                if failure.kind == "http-404":
                    if self._next_path():
                        continue
                    if self.resource.absent_hint:
                        failure = replace(failure, message=f"{failure.message} ({self.resource.absent_hint})")
                self._failed(failure)
                continue
            if self._stop.is_set():
                return
            if not ended_normally:
                self._failed(Failure("ended-early", f"Kubernetes API ended the {self.resource.name} watch long "
                                     "before its timeout", soft=True))

    def _next_path(self) -> bool:
        """After a 404: move to the next API version of the resource (True), or, when every one was
        refused, back to the first for the next paced attempt (False: the 404 is a failure)."""
        paths = self.resource.paths
        if self._path_index + 1 < len(paths):
            self._path_index += 1
            self._resource_version = None  # list afresh under the other version
            if self._path_index not in self._paths_logged:
                self._paths_logged.add(self._path_index)
                LOG.info("%s: %s is not served; trying %s", self.resource.name, paths[self._path_index - 1],
                         paths[self._path_index])
            return True
        self._path_index = 0
        return False

    def _failed(self, failure: Failure) -> None:
        """Pace the next attempt; open, keep or change the failure episode; publish."""
        now = self._monotonic()
        if failure.relist is not None:
            if self._resource_version is not None:  # the watch's version is unusable: relist
                self._counters.relist(self.resource.name, failure.relist)
                self._resource_version = None
                self._list_from = "consistent" if failure.relist == "too-large" else "not-older"
            elif failure.kind in ("gone", "too-large"):  # the list's version is unusable too
                self._list_from = "consistent"
        delay = self.backoff.failed(now, failure.retry_after)
        # A routine event (one 410, one cut) becomes a failure only when it repeats before any watch
        # proved itself: 410 right after the relist that answered the last 410 is a storm.
        repeated = self._failed_since_settled and self._last_failure_kind == failure.kind
        self._failed_since_settled = True
        self._last_failure_kind = failure.kind
        with self._status_lock:
            previous = self._status
            episode, since = previous.episode, previous.episode_since
            if episode is None:
                if not failure.soft or repeated:
                    episode, since = failure, now
            elif not failure.soft and failure.kind != episode.kind:
                episode = failure
            self._status = replace(previous, held=False, settled=False, episode=episode, episode_since=since,
                                   retries=self.backoff.failures, next_delay_s=delay)
        LOG.debug("%s: %s; attempt %d in %.2f s", self.resource.name, failure.message, self.backoff.failures + 1,
                  delay)
        self._on_status(self)
        self._stop.wait(delay)

    def _succeeded(self, **changes: Any) -> None:
        with self._status_lock:
            self._status = replace(self._status, last_success_wall=self._wall_clock(),
                                   last_success_monotonic=self._monotonic(), **changes)
        self._on_status(self)

    def _request(self, verb: str, query: list[tuple[str, str]], timeout: tuple[float, float]) -> Any:
        try:
            response = self._api.get(self.path, query, timeout)
        except Exception as exc:
            status = getattr(exc, "status", None)
            self._counters.request(self.resource.name, verb,
                                   str(status) if isinstance(status, int) and status else NO_ANSWER)
            raise
        self._counters.request(self.resource.name, verb, str(getattr(response, "status", 200)))
        return response

    def _selectors(self) -> list[tuple[str, str]]:
        query = []
        if self.resource.field_selector:
            query.append(("fieldSelector", self.resource.field_selector))
        if self.resource.label_selector:
            query.append(("labelSelector", self.resource.label_selector))
        return query

    def _list(self) -> None:
        query = self._selectors()
        if self._list_from == "not-older" and self._synced_version:
            query += [("resourceVersion", self._synced_version), ("resourceVersionMatch", "NotOlderThan")]
        elif self._list_from != "consistent":
            query.append(("resourceVersion", "0"))
        response = self._request("list", query, (self._timeouts.connect_s, self._timeouts.list_read_s))
        self._response = response
        try:
            body = json.loads(response.data)
        except ValueError as exc:
            raise _Malformed(f"{self.resource.name} list answer is not JSON: {exc}") from None
        finally:
            self._response = None
            response.release_conn()
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise _Malformed(f"{self.resource.name} list answer has no items")
        metadata = body.get("metadata")
        version = str((metadata if isinstance(metadata, dict) else {}).get("resourceVersion") or "")
        try:
            self._decoder.replace(body["items"])
        except DECODE_ERRORS as exc:
            raise _Malformed(f"{self.resource.name} list holds a malformed object: {exc}") from None
        self._resource_version = version
        self._synced_version = version
        self._list_from = "cache"
        self.lists += 1
        self._succeeded(synced=True)

    def _watch(self) -> bool:
        """Stream events until the watch ends; True when the server ended it at its timeout."""
        timeout_s = int(self._timeouts.watch_s + self._random() * self._timeouts.watch_s)
        query = [*self._selectors(), ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("resourceVersion", self._resource_version or ""), ("timeoutSeconds", str(timeout_s))]
        response = self._request("watch", query, (self._timeouts.connect_s,
                                                  timeout_s + self._timeouts.watch_read_slack_s))
        opened = self._monotonic()
        self._response = response
        self.watches += 1
        with self._status_lock:
            self._watch_serial += 1
            serial = self._open_watch = self._watch_serial
        # A watch resumed after a healthy one (at start, or after a timeout) is held at once; after a
        # failure it must prove itself first, so a watch answered 410 at once never counts as held.
        self._succeeded(held=True, settled=not self._failed_since_settled)
        timer = threading.Timer(self._timeouts.watch_settle_s, self._settle, args=(serial,))
        timer.daemon = True
        timer.start()
        try:
            lines = _lines(response)
            while not self._stop.is_set():
                try:
                    line = next(lines)
                except StopIteration:
                    break
                except Exception as exc:
                    if self._stop.is_set():
                        return True
                    raise _StreamCut(f"{type(exc).__name__}: {exc}") from exc
                self._handle(line)
                if self._monotonic() - opened >= self._timeouts.backoff_reset_s:
                    self.backoff.reset()
                if not self._status.settled:
                    self._settle(serial)
        finally:
            timer.cancel()
            self._response = None
            _abort_response(response)
            with self._status_lock:
                self._open_watch = None
                self._status = replace(self._status, held=False)
            self._on_status(self)
        if self._stop.is_set():
            return True
        held_s = self._monotonic() - opened
        if held_s >= self._timeouts.backoff_reset_s:
            self.backoff.reset()
        normal = held_s >= NORMAL_END_FRACTION * timeout_s
        if normal:
            self._failed_since_settled = False
        if normal and self._status.episode is not None:
            self._succeeded(episode=None, episode_since=None, retries=0, next_delay_s=0.0)
        return normal

    def _settle(self, serial: int) -> None:
        """The open watch ``serial`` proved itself (an event or bookmark, or ``watch_settle_s`` open
        without an error): it counts as held for ``kube_api_up``, and a failure episode is over."""
        with self._status_lock:
            if self._open_watch != serial or self._status.settled:
                return
            self._failed_since_settled = False
            self._status = replace(self._status, settled=True, episode=None, episode_since=None, retries=0,
                                   next_delay_s=0.0, last_success_wall=self._wall_clock(),
                                   last_success_monotonic=self._monotonic())
        self._on_status(self)

    def _handle(self, line: bytes) -> None:
        try:
            event = json.loads(line)
            event_type = event["type"]
            obj = event["object"]
        except (ValueError, TypeError, KeyError) as exc:
            raise _Malformed(f"{self.resource.name} watch sent a malformed event: {exc}") from None
        if event_type == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == 410:
                raise _Gone
            message = obj.get("message", "") if isinstance(obj, dict) else str(obj)
            raise _WatchError(code, str(message)[:200])
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        version = str((metadata if isinstance(metadata, dict) else {}).get("resourceVersion") or "")
        if event_type == "BOOKMARK":
            self._counters.bookmark(self.resource.name)
        else:
            try:
                self._decoder.apply(event_type, obj)
            except DECODE_ERRORS as exc:
                raise _Malformed(f"{self.resource.name} watch sent a malformed object: {exc}") from None
        if version:
            self._resource_version = version
            self._synced_version = version
        with self._status_lock:
            self._status = replace(self._status, last_success_wall=self._wall_clock(),
                                   last_success_monotonic=self._monotonic())


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited events from a streaming urllib3 response."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while True:
            newline = buffer.find(b"\n")
            if newline < 0:
                break
            line, buffer = buffer[:newline], buffer[newline + 1:]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _abort_response(response: Any) -> None:
    """Close a (possibly blocked) streaming response from any thread."""
    shutdown = getattr(response, "shutdown", None)
    try:
        if callable(shutdown):
            shutdown()
        response.close()
        response.release_conn()
    except Exception:  # noqa: BLE001, S110 - best effort while tearing a stream down
        pass


@dataclass(frozen=True)
class _GroupChange:
    """What one status change means for a watch group: decided under its lock, logged and acted on outside."""

    condition: tuple[str, str] | None  # ("up", "") or ("down", kind); None before the first settled state
    previous: tuple[str, str] | None
    failing: list[ReflectorStatus]  # the failing reflectors, the longest-failing first
    down_since: float | None
    retries: int
    stale: bool  # the outage just outlasted stale_after_s: drop what was mirrored (once per outage)
    now: float


def _group_condition(statuses: Sequence[ReflectorStatus], failing: Sequence[ReflectorStatus],
                     previous: tuple[str, str] | None) -> tuple[str, str] | None:
    """Down with the first episode's kind, up when every reflector holds a settled mirror, else unchanged."""
    if failing:
        primary = failing[0].episode
        assert primary is not None
        if previous is not None and previous[0] == "down" and primary.soft:
            return previous  # a routine kind (410, cut) taking over an outage is no new state
        return ("down", primary.kind)
    if all(s.held and s.settled for s in statuses):
        return ("up", "")
    return previous


class WatchGroup:
    """Reflectors over one API connection: one ``ApiState``, one log line per change, shared counters.

    ``on_change`` is called (from the reflectors' threads) when the logged condition changed;
    ``on_stale`` when the API has failed for ``stale_after_s`` (it drops the mirrors and returns
    True if there was anything to drop; every reflector then relists on recovery). ``node`` and
    ``description`` only go into log lines.
    """

    def __init__(self, *, node: str, description: str, timeouts: WatchTimeouts,
                 on_change: Callable[[], None] = lambda: None, on_stale: Callable[[], bool] = lambda: False,
                 monotonic: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 random_fraction: Callable[[], float] = random.random) -> None:
        self.node = node
        self.description = description
        self.timeouts = timeouts
        self.counters = ApiCounters()
        self.reflectors: list[Reflector] = []
        self._on_change = on_change
        self._on_stale = on_stale
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._random = random_fraction
        self._lock = threading.Lock()
        self._logged: tuple[str, str] | None = None  # ("up", "") or ("down", kind) as last logged
        self._down_since: float | None = None
        self._down_retries = 0
        self._dropped = False  # what was mirrored has been dropped in this outage

    def add(self, resource: WatchedResource, api: ApiRequests, decoder: Decoder) -> Reflector:
        reflector = Reflector(resource, api, decoder, timeouts=self.timeouts, counters=self.counters,
                              on_status=self._status_changed, monotonic=self._monotonic,
                              wall_clock=self._wall_clock, random_fraction=self._random,
                              thread_name=f"kube-watch-{resource.name}")
        self.reflectors.append(reflector)
        return reflector

    def start(self) -> None:
        for reflector in self.reflectors:
            reflector.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        for reflector in self.reflectors:
            reflector.stop()
        for reflector in self.reflectors:
            reflector.join(timeout_s)

    @property
    def synced(self) -> bool:
        return bool(self.reflectors) and all(r.status.synced for r in self.reflectors)

    @property
    def state(self) -> ApiState:
        statuses = [reflector.status for reflector in self.reflectors]
        if not statuses:
            return ApiState()
        last_wall = max(s.last_success_wall for s in statuses)
        monotonics = [s.last_success_monotonic for s in statuses if s.last_success_monotonic is not None]
        episodes = sorted((s for s in statuses if s.episode is not None),
                          key=lambda s: s.episode_since if s.episode_since is not None else 0.0)
        up = all(s.held and s.settled for s in statuses)
        retries = max(s.retries for s in statuses)
        base = ApiState(up=up, error="", error_kind="", last_success_wall=last_wall,
                        last_success_monotonic=max(monotonics, default=None), retries=retries)
        if episodes:
            episode = episodes[0].episode
            assert episode is not None
            return replace(base, error=episode.message, error_kind=episode.kind)
        if up:
            return base
        if not any(s.synced for s in statuses) and not monotonics:
            return replace(base, error="connecting to the Kubernetes API", error_kind="connecting")
        return replace(base, error="resuming the Kubernetes API watches", error_kind="resuming")

    def _status_changed(self, reflector: Reflector) -> None:
        with self._lock:
            change = self._transition(self._monotonic())
        condition, previous = change.condition, change.previous
        if condition != previous and condition is not None:
            self._log(condition, previous, change.failing, down_since=change.down_since, retries=change.retries,
                      now=change.now)
        dropped = change.stale and self._on_stale()
        if dropped:
            for each in self.reflectors:
                each.request_relist()
            LOG.warning("Kubernetes API failing for %.0f s: dropping what was mirrored (%s)",
                        change.now - (change.down_since or change.now), self.description,
                        extra={"fields": {"node": self.node}})
        if condition != previous or dropped:
            self._on_change()

    def _transition(self, now: float) -> _GroupChange:
        """The group's connection state after a reflector's status changed; the caller holds the lock."""
        statuses = [r.status for r in self.reflectors]
        # The episode that began first speaks for the group: a second resource failing too, or
        # failing differently, is no new state of the connection.
        failing = sorted((s for s in statuses if s.episode is not None),
                         key=lambda s: s.episode_since if s.episode_since is not None else now)
        previous = self._logged
        condition = _group_condition(statuses, failing, previous)
        if failing:
            if self._down_since is None:
                self._down_since = min(s.episode_since or now for s in failing)
            self._down_retries = max(self._down_retries, *(s.retries for s in failing))
        self._logged = condition
        down_since, retries = self._down_since, self._down_retries
        # Drop what was mirrored once per outage: a resource that recovers meanwhile relists and
        # fills the mirror again, which must not be dropped again while another still fails.
        stale = bool(failing) and down_since is not None and not self._dropped \
            and now - down_since > self.timeouts.stale_after_s
        if stale:
            self._dropped = True
        if condition is not None and condition[0] == "up":
            self._down_since, self._down_retries, self._dropped = None, 0, False
        return _GroupChange(condition, previous, failing, down_since, retries, stale, now)

    def _log(self, condition: tuple[str, str], previous: tuple[str, str] | None, failing: list[ReflectorStatus], *,
             down_since: float | None, retries: int, now: float) -> None:
        fields: dict[str, Any] = {"node": self.node}
        if condition[0] == "down":
            status = failing[0]
            assert status.episode is not None
            fields.update(resource=status.resource, retries=status.retries, next_retry_s=round(status.next_delay_s, 1))
            LOG.warning("%s; retry %d in %.1f s", status.episode.message, status.retries, status.next_delay_s,
                        extra={"fields": fields})
        elif previous is None:
            LOG.info("Kubernetes API up: watching %s", self.description, extra={"fields": fields})
        else:
            fields.update(retries=retries, down_s=round(now - (down_since or now), 1))
            LOG.info("Kubernetes API up again after %d retries in %.1f s: watching %s", retries,
                     now - (down_since or now), self.description, extra={"fields": fields})
