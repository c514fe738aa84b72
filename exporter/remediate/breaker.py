"""The circuit breaker and the per-node cooldown: the limits on how much the remediator may change. Pure.

A bad alert rule, a Prometheus glitch or an exporter bug can make every GPU of a cluster look
broken at once; a remediator that believes it would take the whole fleet out of scheduling. So
every *transition* of a node (it starts or stops carrying our taint or our cordon) must pass:

* the **cooldown**: at least ``cooldown`` since the node's previous transition (flapping alerts
  cannot taint and untaint a node in a loop); a node the remediator never changed passes;
* the **hourly limit**: at most ``max_nodes_per_hour`` distinct nodes changed in any rolling
  hour (a node changed twice in the hour counts once);
* the **share limit** (for taints and cordons only): after the change at most
  ``max_tainted_percent`` of the GPU nodes carry our taint or cordon (at least one node is always
  allowed, so a small cluster can still take its one broken node out).

A change that does not pass is held, not dropped: the controller records an Event saying why and
tries again later; the breaker counts as open while anything is held by it. Changes that are not
transitions (a second GPU on an already tainted node, an annotation, a condition) pass freely.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from exporter.remediate.policy import Limits

WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: str = ""  # "cooldown", "max_nodes_per_hour", "max_tainted_percent"
    reason: str = ""  # one sentence for the Event and the log
    retry_at: datetime | None = None  # when a held change can pass (cooldown), if known


ALLOW = Verdict(True)


class Breaker:
    """Remembers recent transitions; answers whether the next one may happen."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._recent: deque[tuple[datetime, str]] = deque()

    def _prune(self, now: datetime) -> None:
        while self._recent and now - self._recent[0][0] >= WINDOW:
            self._recent.popleft()

    def nodes_in_window(self, now: datetime) -> set[str]:
        self._prune(now)
        return {node for _, node in self._recent}

    def record(self, node: str, now: datetime) -> None:
        """A transition of ``node`` happened (or, in dry-run, would have)."""
        self._prune(now)
        self._recent.append((now, node))

    def allowed_tainted(self, gpu_nodes: int) -> int:
        return max(1, math.floor(gpu_nodes * self.limits.max_tainted_percent / 100))

    def check(self, node: str, now: datetime, *, restricting: bool, last_transition: datetime | None,
              tainted_after: int, gpu_nodes: int) -> Verdict:
        """May ``node`` make a transition now? ``restricting``: it would gain a taint or cordon;
        ``tainted_after``: GPU nodes carrying our taint/cordon if it does."""
        if last_transition is not None:
            ready = last_transition + timedelta(seconds=self.limits.cooldown_s)
            if now < ready:
                return Verdict(False, "cooldown",
                               f"the node changed at {last_transition:%H:%M:%S} UTC; per-node cooldown "
                               f"{_span(self.limits.cooldown_s)} ends at {ready:%H:%M:%S} UTC", ready)
        changed = self.nodes_in_window(now)
        if node not in changed and len(changed) >= self.limits.max_nodes_per_hour:
            first = min(moment for moment, _ in self._recent)
            return Verdict(False, "max_nodes_per_hour",
                           f"circuit breaker: {len(changed)} nodes changed in the last hour "
                           f"(limit max_nodes_per_hour={self.limits.max_nodes_per_hour})", first + WINDOW)
        if restricting:
            allowed = self.allowed_tainted(gpu_nodes)
            if tainted_after > allowed:
                return Verdict(False, "max_tainted_percent",
                               f"circuit breaker: {tainted_after} of {gpu_nodes} GPU nodes would be tainted "
                               f"(limit max_tainted_percent={self.limits.max_tainted_percent:g}: at most {allowed})")
        return ALLOW


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
