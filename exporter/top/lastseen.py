"""How old each node's data is, and the rows of a source that went down, kept and marked stale.

A monitoring view that drops a node's GPUs the moment its source stops answering tells the operator
"11 GPUs became 3", which is false: the other 8 still exist, their state is merely unknown since a
moment the view knows. So ``LastSeen`` wraps ``top``'s read function: while any source reports an
error, a node read before and missing now is kept, with the time it was last read, and shown stale
(its last rows, greyed, with "last seen"). When every source answers, a missing node is really gone
and is forgotten.

The age of a node's data is ``now - sampled_at``: the exporter's last complete sample, as its
``gpu_pod_exporter_last_sample_timestamp_seconds`` says (through Prometheus or its ``/metrics``).
It is stale past the view's ``stale_after_s`` (the exporter's bound, ``exporter.conditions``) or,
when the view cannot know the exporter's sampling interval (``top`` builds views from samples),
past the alert rule's fixed bound ``SAMPLES_STALE_ALERT_S`` (GpuPodExporterSamplesStale's). A node
whose exporter says its own data is stale (the ``samples_stale`` condition: the sampler is stalled, as
in the ``hang`` scenario) is stale at once, whatever the bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from exporter.conditions import SAMPLES_STALE_ALERT_S
from exporter.top.model import Filters, NodeView
from exporter.top.sources import Reading

NodeKey = tuple[str, str]  # (cluster, node)


@dataclass(frozen=True)
class Freshness:
    """How current one node's rows are."""

    age_s: float | None  # now - sampled_at; None when the source does not say when it sampled
    stale_after_s: float
    last_seen: float | None = None  # Unix time of the last successful read, when its source is down now
    stalled: bool = False  # the exporter reports its own data stale (the samples_stale condition)

    @property
    def stale(self) -> bool:
        return (self.last_seen is not None or self.stalled
                or (self.age_s is not None and self.age_s > self.stale_after_s))


def node_key(node: NodeView) -> NodeKey:
    return node.cluster, node.node


def freshness(node: NodeView, now: float, last_seen: float | None = None) -> Freshness:
    sampled_at = node.view.get("sampled_at")
    bound = node.view.get("stale_after_s")
    age = max(0.0, now - float(sampled_at)) if isinstance(sampled_at, int | float) and sampled_at else None
    stalled = any(isinstance(c, dict) and c.get("id") == "samples_stale" for c in node.view.get("conditions") or ())
    return Freshness(age, float(bound) if isinstance(bound, int | float) else SAMPLES_STALE_ALERT_S, last_seen,
                     stalled)


def freshness_of(nodes: Iterable[NodeView], now: float) -> dict[NodeKey, Freshness]:
    """Each node's freshness for one read (``top --once``: nothing remembered)."""
    return {node_key(node): freshness(node, now) for node in nodes}


class LastSeen:
    """``read`` with a memory: nodes of a source that is down stay, marked with the time last seen.

    ``__call__`` runs in ``top``'s reader thread while the UI thread asks ``freshness`` and ``missing``:
    the memory is one immutable pair, replaced whole, so a reader never sees half of an update.
    """

    def __init__(self, read: Callable[[Filters], Reading], clock: Callable[[], float] = time.time) -> None:
        self._read = read
        self.clock = clock
        # (every node remembered: (its view, when last read); the ones shown from memory now)
        self._memory: tuple[Mapping[NodeKey, tuple[NodeView, float]], frozenset[NodeKey]] = ({}, frozenset())

    def __call__(self, filters: Filters) -> Reading:
        reading = self._read(filters)
        now = self.clock()
        seen = dict(self._memory[0])
        current = {node_key(node) for node in reading.nodes}
        for node in reading.nodes:
            seen[node_key(node)] = (node, now)
        if not reading.errors:
            # Every source answered: a node it no longer reports is gone, not down.
            seen = {key: value for key, value in seen.items() if key in current}
        missing = frozenset(key for key in seen if key not in current)
        self._memory = (seen, missing)
        kept = [seen[key][0] for key in sorted(missing)]
        return Reading(nodes=[*reading.nodes, *kept], errors=reading.errors,
                       prometheus_queries=reading.prometheus_queries, metrics_reads=reading.metrics_reads)

    def freshness(self, nodes: Iterable[NodeView], now: float | None = None) -> dict[NodeKey, Freshness]:
        """Each node's freshness now; a node kept from an earlier read carries the time it was last seen."""
        at = self.clock() if now is None else now
        seen, missing = self._memory
        return {node_key(node): freshness(node, at, seen[node_key(node)][1] if node_key(node) in missing else None)
                for node in nodes}

    def missing(self) -> Mapping[NodeKey, float]:
        """The nodes shown from memory, and when each was last read."""
        seen, missing = self._memory
        return {key: seen[key][1] for key in sorted(missing)}
