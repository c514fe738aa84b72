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

A change that does not pass is held: the controller records an Event saying why and tries again
later, and drops it when the alert behind it resolves while it is held (a false alarm must not land
once the window rolls). Changes that are not transitions (a second GPU on an already tainted node,
an annotation, a condition) pass freely, and so does every change that gives capacity back.

**The hourly limit latches.** Reaching ``max_nodes_per_hour`` is the signature of the failure the
breaker exists for (a bad rule or an exporter bug making healthy GPUs look broken): when a change
is held by it the breaker *opens* and stays open, whatever the rolling window does, until a person
closes it (``POST /breaker/close`` on the remediator, see docs/remediation.md). While open, no node
gains a taint or cordon; alerts keep being recorded, and those still firing when it is closed are
decided again then. The share limit does not latch: it is a level (how much capacity is out), so a
change it holds goes through once room is made.
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
    """Remembers recent transitions and whether it is open; answers whether the next transition may happen."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._recent: deque[tuple[datetime, str]] = deque()
        self.open_since: datetime | None = None
        self.open_reason = ""

    @property
    def is_open(self) -> bool:
        return self.open_since is not None

    def trip(self, now: datetime, reason: str) -> bool:
        """Open the breaker (the hourly limit held a change); True when it was closed before."""
        if self.open_since is not None:
            return False
        self.open_since, self.open_reason = now, reason
        return True

    def close(self) -> bool:
        """A person closes it; True when it was open. The rolling window is kept: the limit still applies."""
        was_open = self.open_since is not None
        self.open_since, self.open_reason = None, ""
        return was_open

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
        if restricting and self.open_since is not None:
            return Verdict(False, "max_nodes_per_hour",
                           f"circuit breaker open since {self.open_since:%Y-%m-%d %H:%M:%S} UTC ({self.open_reason}); "
                           "it stays open until a person closes it (POST /breaker/close)")
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
