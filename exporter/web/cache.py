"""The exposition cache: render once per change, let every scrape copy bytes.

Sources (sampler, attribution, event watcher, watchdog) call ``invalidate()`` when their published
value changes. A background renderer coalesces bursts of invalidations into one render; scrapes
never render, never call NVML and never wait on a source. The text format is encoded right after
rendering; OpenMetrics and gzip variants are encoded on first request and memoised beside it,
because Prometheus asks for OpenMetrics+gzip by default while curl asks for plain text. A variant
that was asked for during the previous generation is encoded by the renderer right away: otherwise
the first scrape after each render encodes it on the event loop (gzip of a 64-GPU exposition takes
milliseconds), and every scrape arriving meanwhile waits behind it. A variant nobody asks for any
more costs one encoding after its last request, no more.

If a render or its text encoding fails (a bug, never a user mistake), the previous exposition keeps
being served and the failure is logged: a scrape still answers with the last good data instead of
a 500, and the next invalidation tries again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from exporter.logs import get_logger
from exporter.metrics.exposition import (
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    counters_need_text,
    encode_openmetrics,
    encode_text,
    gzip_bytes,
)
from exporter.supervisor import supervised
from exporter.web.nodeview import COUNTER_FAMILIES, BuiltView, build, remember_counters, served, view_json

log = get_logger("exposition")


class RenderedExposition:
    """One rendered generation; variants are encoded lazily and memoised (thread-safe)."""

    def __init__(self, generation: int, families: list[Metric],
                 prepare: Iterable[tuple[bool, bool]] = ()) -> None:
        self.generation = generation
        self._families = families
        self._variants: dict[tuple[bool, bool], bytes] = {(False, False): encode_text(families)}
        self._lock = threading.Lock()
        self.asked: set[tuple[bool, bool]] = set()  # (openmetrics, gzip) variants scrapes asked for
        self.series = sum(len(family.samples) for family in families)
        # OpenMetrics would type dcgm-exporter's counters (no _total) "unknown": negotiation then prefers text.
        self.counters_need_text = counters_need_text(families)
        self._node_view: BuiltView | None = None
        # Its own lock: a scrape encoding a variant (on the event loop) must never wait for a view build.
        self._node_view_lock = threading.Lock()
        for openmetrics, compressed in prepare:  # the renderer's thread, before anyone can scrape this one
            self._encode((openmetrics, compressed))

    @property
    def node_view_ready(self) -> BuiltView | None:
        """This generation's node view if it was built already (no work, no lock)."""
        return self._node_view

    def node_view(self, exporter_version: str) -> BuiltView:
        """This generation's node view: built on first request, then kept in memory.

        The view is derived from this exposition's samples (``exporter.web.nodeview``), so the page
        shows exactly what ``/metrics`` serves and nobody pays for it until someone looks.
        """
        view = self._node_view
        if view is None:
            with self._node_view_lock:
                view = self._node_view
                if view is None:
                    samples = ((s.name, s.labels, s.value) for family in self._families for s in family.samples)
                    view = self._node_view = build(samples, exporter_version=exporter_version,
                                                   generation=self.generation)
        return view

    def encoded(self, openmetrics: bool, compressed: bool) -> bool:
        """Whether this variant is encoded already (a scrape asking for it only copies bytes)."""
        return (openmetrics, compressed) in self._variants

    def body(self, openmetrics: bool, compressed: bool) -> bytes:
        key = (openmetrics, compressed)
        self.asked.add(key)
        variant = self._variants.get(key)
        if variant is not None:
            return variant
        return self._encode(key)

    def _encode(self, key: tuple[bool, bool]) -> bytes:
        openmetrics, compressed = key
        with self._lock:
            variant = self._variants.get(key)
            if variant is None:
                plain = self._variants.get((openmetrics, False))
                if plain is None:
                    plain = encode_openmetrics(self._families)
                    self._variants[(openmetrics, False)] = plain
                variant = gzip_bytes(plain) if compressed else plain
                self._variants[key] = variant
        return variant

    @staticmethod
    def content_type(openmetrics: bool) -> str:
        return OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE


class ExpositionCache:
    def __init__(self, render: Callable[[], list[Metric]]) -> None:
        self._render = render
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._current = RenderedExposition(0, [])
        self._render_lock = threading.Lock()
        self.render_failures = 0

    @property
    def current(self) -> RenderedExposition:
        return self._current

    def invalidate(self) -> None:
        """Mark the exposition stale; cheap and safe from any thread."""
        self._dirty.set()

    def refresh(self) -> RenderedExposition:
        """Render now (synchronously) and publish the result."""
        with self._render_lock:
            self._dirty.clear()
            try:
                families = self._render()
                # Encoding is part of the render: if it failed outside this guard, the renderer
                # thread would die and every later scrape would get this exposition forever.
                rendered = RenderedExposition(self._generation + 1, families, prepare=frozenset(self._current.asked))
                # The node view's windowed conditions (new ECC errors in 10 min, ...) need every
                # exposition's counters, not only those of the generations someone looked at.
                remember_counters((s.name, s.labels, s.value) for family in families
                                  if family.name in COUNTER_FAMILIES for s in family.samples)
            except Exception:
                self.render_failures += 1
                log.exception("rendering failed; the previous exposition is still served")
                return self._current
            self._generation += 1
            self._current = rendered
            return self._current

    def start(self) -> None:
        self.refresh()
        self._thread = supervised(self._run, name="renderer", stop=self._stop)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while True:
            self._dirty.wait()
            if self._stop.is_set():
                return
            self.refresh()


def node_view_json(view: BuiltView, served_at: float, sampling_interval_s: float | None) -> bytes:
    """``/gpus.json`` as served now: the generation's view stamped with the server's clock, so a view
    cached while the sampler is stuck still reports its age and turns stale."""
    return view_json(served(view, served_at=served_at, sampling_interval_s=sampling_interval_s))
