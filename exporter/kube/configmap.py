"""``-m/--configmap-data <namespace>:<name>``: the counters CSV from a ConfigMap, through the API server.

dcgm-exporter reads key ``metrics`` of that ConfigMap once at start and exits when it cannot
(its ``internal/pkg/counters/counter_config.go``). Here:

* at start the ConfigMap is read once (``read``). A CSV with a mistake is the user's error: one
  line naming ``configmap <ns>/<name> (key metrics):<line>: <field>`` and exit code 2, as for a
  file. An API server that cannot be reached, or a ConfigMap that is missing, is not: the exporter
  starts with ``--collectors`` (or the built-in default) and says so;
* afterwards it is re-read every ``--configmap-refresh-interval`` (60 s) on a thread of its own,
  never per scrape. A changed CSV is applied without a restart (``on_change``: the renderer at
  once, the sampler from its next cycle: ``install(hub)`` makes ``on_change`` the hub's
  ``set_counters``); only adding or removing the ``DCGM_EXP_CLOCK_EVENTS_*``
  rows waits for a restart, their tracker being set up at start); a broken one is
  logged once and the counters in use stay; failures back off exponentially with jitter (so a fleet
  does not hammer a struggling API server in step) and are logged once per state change.

The RBAC this needs is ``get`` on that one ConfigMap; the chart's Role grants exactly that when
``-m`` is set through its values.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

from exporter.backoff import Backoff, BackoffPolicy
from exporter.hub import Hub
from exporter.kube.apiserver import ApiError, build_lists
from exporter.logs import get_logger
from exporter.metrics.counters import CounterFileError, CounterSet, parse_counters
from exporter.options import ConfigMapRef
from exporter.periodic import Periodic

LOG = get_logger("kube.configmap")

KEY = "metrics"  # dcgm-exporter's key
REQUEST_TIMEOUT_S = (5.0, 10.0)
BACKOFF = BackoffPolicy(initial_s=5.0, max_s=300.0)  # exporter.backoff: one attempt per window


class ConfigMapUnavailableError(Exception):
    """The ConfigMap could not be fetched (API unreachable, forbidden, missing, no ``metrics`` key)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ConfigMapCounters:
    """The counters CSV of one ConfigMap: read once at start, then refreshed in the background."""

    def __init__(self, reference: ConfigMapRef, kubeconfig: str, interval_s: float, *,
                 lists_factory: Callable[[str], Any] = build_lists,
                 jitter: Callable[[], float] = random.random, clock: Callable[[], float] = time.monotonic) -> None:
        self.reference = reference
        self.kubeconfig = kubeconfig
        self.interval_s = interval_s
        self.on_change: Callable[[CounterSet], None] = lambda _counters: None
        self._lists_factory = lists_factory
        self._lists: Any = None
        self._backoff = Backoff(BACKOFF, jitter)
        self._clock = clock
        self._retry_after_s: float | None = None
        self._text: str | None = None  # the CSV text in use (None: the file fallback is in use)
        self._rejected: str | None = None  # the last CSV text that failed to parse (logged once)
        self._failure: str | None = None  # the last fetch error (logged once per change)
        self._thread = Periodic("configmap-counters", self.next_delay, interval_s)

    @property
    def source(self) -> str:
        return f"configmap {self.reference.path} (key {KEY})"

    # -- fetching ----------------------------------------------------------------------------------

    def fetch(self) -> str:
        """The CSV text of key ``metrics``; ``ConfigMapUnavailableError`` says why not."""
        try:
            if self._lists is None:
                self._lists = self._lists_factory(self.kubeconfig)
            response = self._lists.read_namespaced_config_map(
                self.reference.name, self.reference.namespace, _request_timeout=REQUEST_TIMEOUT_S,
                _preload_content=False)
            try:
                body = response.read()
            finally:
                release = getattr(response, "release_conn", None)
                if release is not None:
                    release()
            document = json.loads(body)
        except ApiError as exc:  # every answer that is not 2xx, whichever transport the one client uses
            raise ConfigMapUnavailableError(self._status_message(exc.status, exc.reason), exc.retry_after) from None
        except Exception as exc:  # noqa: BLE001 - urllib3, TLS, kubeconfig, JSON: all mean "unusable"
            raise ConfigMapUnavailableError(f"{self.source}: cannot reach the API server: {exc}") from None
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get(KEY), str):
            raise ConfigMapUnavailableError(f"{self.source}: the ConfigMap has no key {KEY!r} "
                                            "(dcgm-exporter's key for the counters CSV)")
        text: str = data[KEY]
        return text

    def _status_message(self, status: int, reason: str) -> str:
        if status == 404:
            return f"{self.source}: ConfigMap not found"
        if status in (401, 403):
            return (f"{self.source}: the API server refused ({status} {reason}): the service account needs "
                    f"'get' on configmaps/{self.reference.name} in namespace {self.reference.namespace}")
        return f"{self.source}: the API server answered {status} {reason}"

    def parse(self, text: str) -> CounterSet:
        """``CounterFileError`` (naming this ConfigMap, the line and the field) for a CSV with a mistake."""
        return parse_counters(text, self.source)

    def read(self) -> CounterSet:
        """Fetch and parse once (at start); remembers the text so the refresh only reports changes."""
        text = self.fetch()
        counters = self.parse(text)
        self._text = text
        return counters

    # -- refreshing --------------------------------------------------------------------------------

    def install(self, hub: Hub) -> None:
        """Plug into the hub (after the first ``read``): refresh with the app, apply a changed CSV to it."""
        self.on_change = hub.set_counters
        hub.add_service(self.start, self.stop)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def next_delay(self) -> float:
        """One refresh; the wait until the next: the interval, or after failures the shared backoff's
        (jittered windows, so nodes that failed together do not retry together; Retry-After honoured)."""
        if self.refresh():
            self._backoff.reset()
            return self.interval_s
        return self._backoff.failed(self._clock(), self._retry_after_s)

    def refresh(self) -> bool:
        """One background read; applies a changed, valid CSV. False when the fetch failed."""
        try:
            text = self.fetch()
        except ConfigMapUnavailableError as exc:
            self._retry_after_s = exc.retry_after_s
            if str(exc) != self._failure:
                self._failure = str(exc)
                LOG.warning("%s; the counters in use stay, retrying with backoff", exc)
            return False
        if self._failure is not None:
            self._failure = None
            LOG.info("%s is readable again", self.source)
        if text in (self._text, self._rejected):
            return True
        try:
            counters = self.parse(text)
        except CounterFileError as exc:
            self._rejected = text
            LOG.error("the counters CSV in %s has a mistake; the counters in use stay: %s",  # noqa: TRY400 - user error
                      self.source, exc)
            return True
        self._text, self._rejected = text, None
        for warning in counters.warnings:
            LOG.warning(warning)
        LOG.info("counters CSV changed; exporting the new rows from the next sampling cycle",
                 extra={"fields": {"source": self.source, "metrics": len(counters.metrics)}})
        try:
            self.on_change(counters)
        except Exception:  # a failing callback must not end the refresh thread
            LOG.exception("applying the new counters failed")
        return True
