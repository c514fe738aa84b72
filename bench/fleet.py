"""A fleet of exporters' API watches against one fake API server, driven through failure phases.

``python -m bench.fleet [--nodes 100] [--scale 0.1] [--out docs/fleet-results.json]``

Each simulated node is the exporter's real ``KubernetesMetadata`` (its pod and namespace reflectors,
the urllib3 transport, the backoff, the logging), named ``node-NNN``, with its own User-Agent
(``gpu-pod-exporter/<version> node/node-NNN``), all in this one process and all talking HTTP to one
``FakeApiServer``, which records every request (arrival time, verb, resource, User-Agent, status).
The phases are what a large cluster's API server goes through:

``normal``      nothing happens: the steady state;
``gone-storm``  every resumed watch is answered 410 Gone (an API server stuck in a relist loop);
``errors-500``  every request is answered 500 (open watches are cut);
``throttled``   every request is answered 429 with Retry-After (API Priority and Fairness), watches cut;
``restart``     the API server goes down (every connection cut, port closed) and comes back with
                resourceVersions starting over (an etcd restore);
``slow``        every answer takes longer than the list timeout; watches cut, history expired.

Time is scaled: every duration of the exporter's real schedule (backoff windows, watch timeouts,
list timeout, stale limit) and of the phases is multiplied by ``scale``, so a fleet test of a few
seconds exercises minutes of real behaviour. The backoff is scale-free (windows, attempts per
window), so per-node figures convert back to real time exactly: a count per virtual second is a
count per real second on a cluster. ``report`` turns a run into the per-phase figures that
docs/fleet.md quotes; tests/kube/test_fleet.py asserts on the same figures.

What depends on the machine and what does not: arrival times at the server are wall-clock figures (a
busy machine delays threads, and at ``scale`` 1/40 a 100 ms stall is 4 virtual seconds), so they are
reported, never judged by a statistic. The jitter is judged on what the exporter *decided*: each node
draws from its own seeded random source (``FleetSettings.seed``), and every backoff decision (window,
draw, planned moment) is recorded (``BackoffPlan``), so the spread of the fleet's reconnects is a
property of those decisions, the same on a quiet and on a loaded machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter.backoff import Backoff, BackoffPolicy
from exporter.kube.metadata import KubernetesMetadata
from exporter.kube.reflector import Reflector, WatchTimeouts
from simulator.fakeapiserver import FakeApiServer, RequestRecord

RESOURCES = ("pods", "namespaces")
NODE_AGENT = re.compile(r"node/(\S+)")
# Log lines one node may write per phase: each is a change of state (down with its kind, up again).
ALLOWED_LOG_LINES = {"normal": 0, "gone-storm": 2, "errors-500": 2, "throttled": 2, "restart": 2, "slow": 2}
REAL = WatchTimeouts()


@dataclass(frozen=True)
class FleetSettings:
    """The run, in the exporter's real seconds ("virtual"); ``scale`` turns them into test seconds."""

    nodes: int = 50
    scale: float = 1 / 40
    phase_s: float = 120.0  # each failure phase
    slow_s: float = 240.0  # the slow phase: several list timeouts (30 s each), shorter than stale_after (300 s)
    normal_s: float = 120.0
    restart_down_s: float = 30.0
    retry_after_s: float = 30.0  # the throttled phase's Retry-After (longer than the first windows)
    slow_delay_s: float = 40.0  # > the list timeout (30 s)
    recovery_deadline_s: float = 600.0  # virtual seconds to wait for every node to be back after a phase
    pods_per_node: int = 3
    namespaces: int = 20
    seed: int = 31  # node i draws its jitter from random.Random(seed * 100_003 + i): a run's draws repeat

    def test_s(self, virtual_s: float) -> float:
        return virtual_s * self.scale


def scaled_timeouts(scale: float) -> WatchTimeouts:
    """The exporter's default timeouts and backoff, every duration multiplied by ``scale``."""
    # Network timeouts keep a floor of 2 s: one process holding a fleet and its API server on a shared
    # test machine sometimes takes a second to answer, which a real API server would not.
    return WatchTimeouts(
        connect_s=max(2.0, REAL.connect_s * scale), list_read_s=max(2.0, REAL.list_read_s * scale),
        watch_s=max(1, round(REAL.watch_s * scale)), watch_read_slack_s=max(2.0, REAL.watch_read_slack_s * scale),
        backoff_initial_s=REAL.backoff_initial_s * scale, backoff_max_s=REAL.backoff_max_s * scale,
        backoff_reset_s=REAL.backoff_reset_s * scale, retry_after_max_s=REAL.retry_after_max_s * scale,
        watch_settle_s=max(1.0, REAL.watch_settle_s * scale),  # a 410 can take a busy machine 100s of ms
        stale_after_s=REAL.stale_after_s * scale)


@dataclass(frozen=True)
class BackoffPlan:
    """One backoff decision of one watch (``Backoff.failed``), in test seconds (``time.monotonic()``)."""

    node: str
    resource: str
    window: int  # the window number (consecutive failures)
    decided_at: float  # when the failed attempt ended
    window_start: float
    window_length: float
    attempt_at: float  # the moment the next attempt was planned for: window_start + draw * window_length

    @property
    def position(self) -> float:
        """Where in its window the attempt was planned, 0 (start) to 1 (end)."""
        return (self.attempt_at - self.window_start) / self.window_length


class _PlannedBackoff(Backoff):
    """The exporter's ``Backoff``, unchanged, with every decision appended to ``plans``."""

    def __init__(self, policy: BackoffPolicy, random_fraction: Callable[[], float], node: str, resource: str,
                 plans: list[BackoffPlan]) -> None:
        super().__init__(policy, random_fraction)
        self._node, self._resource, self._plans = node, resource, plans

    def failed(self, now: float, retry_after_s: float | None = None) -> float:
        delay = super().failed(now, retry_after_s)
        self._plans.append(BackoffPlan(self._node, self._resource, self.failures, now, self.window_start,
                                       self.window_length, now + delay))
        return delay


@dataclass
class Histogram:
    """When each node's watches first reached the restarted API server, after it came back, and
    where in its backoff window each of those requests had been planned."""

    origin: str
    bin_s: float  # virtual seconds per bin
    counts: list[int]  # arrivals at the server (wall clock: reported, not judged)
    first_s: float  # virtual seconds after the server came back
    last_s: float
    # Of the same first requests: the position of their planned moment in their backoff window, in
    # tenths (the exporter's decisions: the same on any machine), and how many arrived before it.
    planned_tenths: list[int] = field(default_factory=lambda: [0] * 10)
    planned_windows: dict[int, int] = field(default_factory=dict)  # window number -> watches
    before_plan: int = 0

    @property
    def max_share(self) -> float:
        total = sum(self.counts)
        return max(self.counts) / total if total else 0.0

    @property
    def spread_s(self) -> float:
        return self.last_s - self.first_s

    @property
    def planned_max_share(self) -> float:
        total = sum(self.planned_tenths)
        return max(self.planned_tenths) / total if total else 0.0


@dataclass
class PhaseReport:
    """One phase's figures. Counts are per node unless named otherwise; times are virtual seconds."""

    name: str
    duration_s: float  # the failure itself
    recovery_s: float  # from healing until every node held both watches again (and logged so)
    requests_mean: float
    requests_max: int
    requests_by_verb: dict[str, float]  # mean per node
    requests_by_status: dict[str, float]  # mean per node
    budget: int  # the most requests one node may send in duration + recovery (see ``request_budget``)
    relists_mean: float
    relists_by_reason: dict[str, int]  # fleet totals
    consistent_lists: int  # fleet total of lists that bypassed the watch cache
    log_lines_max: int
    log_lines_total: int
    allowed_log_lines: int
    retries_max: int  # the longest failure streak a node saw (its window number)
    down_nodes_mid_phase: int  # nodes whose kube_api_up was 0 halfway through the phase
    open_watches_mid_phase: int  # watches the server held halfway through the phase (fleet total)
    up_nodes_end: int
    open_watches_end: int
    reconnects: Histogram | None = None
    min_gap_after_429_s: float | None = None  # shortest wait of any node after a 429 (virtual seconds)
    log_samples: list[str] = field(default_factory=list)

    def per_second(self, count: float) -> float:
        total = self.duration_s + self.recovery_s
        return count / total if total else 0.0


def reconnect_window(down_s: float) -> float:
    """The backoff window that follows the one open when an API server down for ``down_s`` comes back:
    every node that lost its watches at once retries in it (the real defaults, virtual seconds)."""
    policy = REAL.backoff_policy()
    return policy.window(policy.windows_until(down_s) + 1)


def request_budget(timeouts: WatchTimeouts, virtual_s: float, scale: float) -> int:
    """Requests one node may send in ``virtual_s``: per resource, a list and a watch per attempt, one
    attempt per backoff window (``BackoffPolicy.max_attempts``), plus the recovery's list and watch."""
    attempts = timeouts.backoff_policy().max_attempts(virtual_s * scale)
    return len(RESOURCES) * (2 * attempts + 2)


class _LogLines(logging.Handler):
    """Every line the watches log, with the node it names and when (time.monotonic())."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str, str, str]] = []  # (at, node, level, message)

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", None) or {}
        self.lines.append((time.monotonic(), str(fields.get("node", "")), record.levelname, record.getMessage()))


@contextmanager
def _captured_logs() -> Iterator[_LogLines]:
    logger = logging.getLogger("gpu_pod_exporter.kube.api")
    handler = _LogLines()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


class Fleet:
    """``settings.nodes`` exporters' API watches against one fake API server (see the module docstring)."""

    def __init__(self, settings: FleetSettings, workdir: Path) -> None:
        self.settings = settings
        self.timeouts = scaled_timeouts(settings.scale)
        self.api = FakeApiServer("node-000", bookmark_interval_s=settings.test_s(10.0))
        self.api.too_large_retry_after_s = settings.test_s(1.0)
        self.workdir = workdir
        self.nodes: list[KubernetesMetadata] = []
        self.reports: list[PhaseReport] = []
        self.plans: list[BackoffPlan] = []  # every backoff decision of every watch (list.append is atomic)
        self._randoms: dict[str, Callable[[], float]] = {}

    def node_name(self, index: int) -> str:
        return f"node-{index:03d}"

    def start(self) -> None:
        self.api.start()
        for index in range(self.settings.namespaces):
            self.api.add_namespace(f"team-{index}", {"team": f"team-{index % 5}"})
        for index in range(self.settings.nodes):
            for pod in range(self.settings.pods_per_node):
                self.api.add_pod(f"team-{pod % self.settings.namespaces}", f"job-{index}-{pod}",
                                 node_name=self.node_name(index), labels={"app": "train"},
                                 containers=[("main", f"containerd://{index:032x}{pod:032x}")])
        kubeconfig = str(self.api.write_kubeconfig(self.workdir / "kubeconfig"))
        self._randoms = {self.node_name(index): random.Random(self.settings.seed * 100_003 + index).random
                         for index in range(self.settings.nodes)}
        self.nodes = [KubernetesMetadata(name, kubeconfig=kubeconfig, timeouts=self.timeouts,
                                         random_fraction=draw) for name, draw in self._randoms.items()]
        for node in self.nodes:
            node.start()
            for reflector in node.reflectors:
                self._record_plans(node.node_name, reflector)
        self._wait(self._all_healthy, 60.0, "every node to list and watch")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop(timeout_s=2.0)
        self.api.stop()

    def _record_plans(self, node: str, reflector: Reflector) -> None:
        """Give the reflector an identical backoff (same policy, same random source) that records its
        decisions. Swapped right after start, before any failure: only the first list and watch have run."""
        reflector.backoff = _PlannedBackoff(self.timeouts.backoff_policy(), self._randoms[node], node,
                                            reflector.resource.name, self.plans)

    # -- conditions ---------------------------------------------------------------------------------

    def _all_healthy(self) -> bool:
        return all(node.state.up and all(r.status.episode is None for r in node.reflectors) for node in self.nodes)

    def _wait(self, condition: Callable[[], bool], deadline_s: float, what: str) -> None:
        end = time.monotonic() + deadline_s
        while not condition():
            if time.monotonic() > end:
                down = [node.node_name for node in self.nodes if not node.state.up]
                raise TimeoutError(f"timed out waiting for {what}; nodes down: {down[:5]} "
                                   f"({len(down)} of {len(self.nodes)})")
            time.sleep(0.01)

    # -- phases ---------------------------------------------------------------------------------------

    def run(self) -> list[PhaseReport]:
        settings = self.settings
        api = self.api
        with _captured_logs() as logs:
            self._phase(logs, "normal", settings.normal_s, start=lambda: None, heal=lambda: None)
            self._phase(logs, "gone-storm", settings.phase_s, start=lambda: api.set_gone_storm(True),
                        heal=lambda: api.set_gone_storm(False))
            self._phase(logs, "errors-500", settings.phase_s, start=lambda: api.set_outage("500"),
                        heal=lambda: api.set_outage(None))
            self._phase(logs, "throttled", settings.phase_s,
                        start=lambda: (api.set_throttle(settings.test_s(settings.retry_after_s)), api.cut_watches()),
                        heal=lambda: api.set_throttle(None))
            self._phase(logs, "restart", settings.phase_s,
                        start=lambda: api.restart(down_s=settings.test_s(settings.restart_down_s),
                                                  reset_resource_versions=True),
                        heal=lambda: None)
            self._phase(logs, "slow", settings.slow_s,
                        start=lambda: (api.set_delay(max(settings.test_s(settings.slow_delay_s),
                                                         1.5 * self.timeouts.list_read_s)),
                                       api.cut_watches(), api.expire_history()),
                        heal=lambda: api.set_delay(0.0))
        return self.reports

    def _phase(self, logs: _LogLines, name: str, virtual_s: float, *, start: Callable[[], object],
               heal: Callable[[], object]) -> None:
        settings = self.settings
        # Incidents are apart: every node has held its watches long enough (backoff_reset_s, 2 minutes)
        # for its backoff to start again at the first window, as it would between two real incidents.
        self._wait(lambda: all(r.backoff.failures == 0 for node in self.nodes for r in node.reflectors),
                   3 * self.timeouts.backoff_reset_s + 10, f"every backoff reset before {name}")
        relists_before = self._relists()
        requests_before = self._requests()
        consistent_before = self.api.list_reads["consistent"]
        began = time.monotonic()
        start()
        up_at = began + settings.test_s(settings.restart_down_s) if name == "restart" else None
        # Every node must see the failure: waited for as a state until the phase's end (a busy machine is
        # slower to notice), then read at halfway or later, so that a node flapping back up is caught.
        # The restart phase's server is back at ``up_at``: from then on "up" is the truth, so the reading is
        # taken before it; a machine so busy that every node noticed the failure only after the server was
        # back keeps the reading of the moment all were seen down (taken before the server came back).
        halfway, end = began + settings.test_s(virtual_s) / 2, began + settings.test_s(virtual_s)
        noticed: list[int] = [0]

        def all_down() -> bool:
            noticed[0] = max(noticed[0], sum(1 for node in self.nodes if not node.state.up))
            return noticed[0] == len(self.nodes)

        self._poll_until(all_down, end if up_at is None else up_at)
        down_noticed = noticed[0]
        self._sleep_until(halfway if up_at is None else min(halfway, up_at))
        down_now = sum(1 for node in self.nodes if not node.state.up)
        down_mid = down_now if up_at is None or time.monotonic() < up_at else down_noticed
        watches_mid = self.api.open_watches()
        retries = max(r.status.retries for node in self.nodes for r in node.reflectors)
        self._sleep_until(began + settings.test_s(virtual_s))
        retries = max(retries, *(r.status.retries for node in self.nodes for r in node.reflectors))
        healed = time.monotonic()
        heal()
        self._wait(self._all_healthy, settings.test_s(settings.recovery_deadline_s), f"recovery after {name}")
        recovered = time.monotonic()
        records = self.api.records(began, recovered)
        lines = [line for line in logs.lines if began <= line[0] <= recovered]
        sent = {key: count - requests_before.get(key, 0) for key, count in self._requests().items()}
        self.reports.append(self._report(
            name, sent, records, lines, duration=healed - began, recovery=recovered - healed,
            relists=self._relists() - relists_before, consistent=self.api.list_reads["consistent"] - consistent_before,
            retries=retries, down_mid=down_mid, watches_mid=watches_mid, up_at=up_at))

    def _poll_until(self, condition: Callable[[], bool], moment: float) -> None:
        """Until ``condition`` holds or ``moment`` (``time.monotonic()``) passes, whichever comes first."""
        while not condition() and time.monotonic() < moment:
            time.sleep(0.01)

    def _sleep_until(self, moment: float) -> None:
        """The phase runs for a set time: that is what is measured (requests per second), not awaited."""
        delay = moment - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _requests(self) -> dict[tuple[str, str, str], int]:
        """Requests sent so far by (node, verb, code), from each node's own counters: refused
        connections count too (they never reach the server's log)."""
        total: dict[tuple[str, str, str], int] = {}
        for node in self.nodes:
            for (_, verb, code), count in node.counters.requests():
                key = (node.node_name, verb, code)
                total[key] = total.get(key, 0) + count
        return total

    def _relists(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for node in self.nodes:
            for (_, reason), count in node.counters.relists():
                total[reason] += count
        return total

    def _report(self, name: str, sent: dict[tuple[str, str, str], int], records: Sequence[RequestRecord],
                lines: Sequence[tuple[float, str, str, str]], *,
                duration: float, recovery: float, relists: Counter[str], consistent: int, retries: int,
                down_mid: int, watches_mid: int, up_at: float | None) -> PhaseReport:
        scale = self.settings.scale
        per_node: Counter[str] = Counter()
        by_verb: Counter[str] = Counter()
        by_status: Counter[str] = Counter()
        for (node_name, verb, code), number in sent.items():
            per_node[node_name] += number
            by_verb[verb] += number
            by_status[code] += number
        count = len(self.nodes)
        counts = [per_node.get(node.node_name, 0) for node in self.nodes]
        lines_per_node = Counter(node for _, node, _, _ in lines)
        reconnects = self._reconnects(records, up_at) if up_at is not None else None
        streams: dict[tuple[str, str], list[RequestRecord]] = {}
        for record in sorted(records, key=lambda r: r.at):
            match = NODE_AGENT.search(record.user_agent)
            if match is not None:
                streams.setdefault((match.group(1), record.resource), []).append(record)
        gaps = [(later.at - earlier.answered_at) / scale for stream in streams.values()
                for earlier, later in itertools.pairwise(stream) if earlier.status == 429]
        return PhaseReport(
            name=name, duration_s=duration / scale, recovery_s=recovery / scale,
            requests_mean=sum(counts) / count, requests_max=max(counts),
            requests_by_verb={verb: n / count for verb, n in sorted(by_verb.items())},
            requests_by_status={status: n / count for status, n in sorted(by_status.items())},
            budget=request_budget(self.timeouts, (duration + recovery) / scale, scale),
            relists_mean=sum(relists.values()) / count, relists_by_reason=dict(sorted(relists.items())),
            consistent_lists=consistent, log_lines_max=max(lines_per_node.values(), default=0),
            log_lines_total=len(lines), allowed_log_lines=ALLOWED_LOG_LINES[name], retries_max=retries,
            down_nodes_mid_phase=down_mid, open_watches_mid_phase=watches_mid,
            up_nodes_end=sum(1 for node in self.nodes if node.state.up),
            open_watches_end=self.api.open_watches(), reconnects=reconnects,
            min_gap_after_429_s=min(gaps) if gaps else None,
            log_samples=sorted({re.sub(r"[\d.]+", "N", message) for _, _, _, message in lines})[:6])

    def _reconnects(self, records: Sequence[RequestRecord], up_at: float) -> Histogram:
        """The first request of each (node, resource) that reached the server after it came back."""
        scale = self.settings.scale
        first: dict[tuple[str, str], float] = {}  # test seconds (time.monotonic())
        for record in sorted(records, key=lambda r: r.at):
            match = NODE_AGENT.search(record.user_agent)
            if match is None or record.at < up_at:
                continue
            first.setdefault((match.group(1), record.resource), record.at)
        times = sorted((at - up_at) / scale for at in first.values())
        window = reconnect_window(self.settings.restart_down_s)
        width = window / 10  # 20 bins: the window the fleet comes back in, and as long again for stragglers
        counts = [0] * 20
        for value in times:
            counts[min(len(counts) - 1, int(value / width))] += 1
        # The decision behind each of those requests: the stream's last backoff plan made before it arrived.
        plans: dict[tuple[str, str], list[BackoffPlan]] = {}
        for plan in sorted(self.plans, key=lambda p: p.decided_at):
            plans.setdefault((plan.node, plan.resource), []).append(plan)
        tenths, windows, before_plan = [0] * 10, Counter[int](), 0
        for stream, arrived in first.items():
            made = [plan for plan in plans.get(stream, []) if plan.decided_at <= arrived]
            if not made:
                continue
            plan = made[-1]
            tenths[min(9, int(plan.position * 10))] += 1
            windows[plan.window] += 1
            before_plan += arrived < plan.attempt_at - 0.001  # 1 ms: the clocks' float rounding, no more
        return Histogram(origin="the API server back up", bin_s=width, counts=counts,
                         first_s=times[0] if times else 0.0, last_s=times[-1] if times else 0.0,
                         planned_tenths=tenths, planned_windows=dict(sorted(windows.items())),
                         before_plan=before_plan)


def run(settings: FleetSettings) -> dict[str, Any]:
    """Start the fleet, run every phase, stop; the results as plain data (what ``--out`` writes)."""
    with tempfile.TemporaryDirectory(prefix="gpe-fleet-") as workdir:
        fleet = Fleet(settings, Path(workdir))
        started = time.monotonic()
        fleet.start()
        try:
            reports = fleet.run()
        finally:
            fleet.stop()
        return {"settings": asdict(settings), "timeouts_virtual": asdict(REAL),
                "wall_s": round(time.monotonic() - started, 1), "phases": [asdict(report) for report in reports]}


def extrapolate(results: dict[str, Any], clusters: Sequence[int] = (1_000, 5_000)) -> list[dict[str, Any]]:
    """Per phase: requests per second per node (mean and worst node) and for whole clusters."""
    rows = []
    for phase in results["phases"]:
        seconds = phase["duration_s"] + phase["recovery_s"]
        mean = phase["requests_mean"] / seconds
        worst = phase["requests_max"] / seconds
        rows.append({"phase": phase["name"], "per_node": mean, "worst_node": worst,
                     **{f"cluster_{size}": mean * size for size in clusters}})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=FleetSettings.nodes)
    parser.add_argument("--scale", type=float, default=FleetSettings.scale,
                        help="test seconds per real second (smaller: faster, coarser)")
    parser.add_argument("--phase", type=float, default=FleetSettings.phase_s, help="virtual seconds per phase")
    parser.add_argument("--normal", type=float, default=FleetSettings.normal_s, help="virtual seconds of steady state")
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    settings = FleetSettings(nodes=args.nodes, scale=args.scale, phase_s=args.phase, normal_s=args.normal)
    results = run(settings)
    results["extrapolated"] = extrapolate(results)
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    for phase in results["phases"]:
        reconnects = phase["reconnects"]
        print(f"{phase['name']:11s} {phase['duration_s']:6.0f}+{phase['recovery_s']:4.0f} s  requests/node "
              f"mean {phase['requests_mean']:6.2f} max {phase['requests_max']:3d} (budget {phase['budget']:3d})  "
              f"log lines/node max {phase['log_lines_max']} (allowed {phase['allowed_log_lines']})"
              + (f"  reconnects over {reconnects['last_s'] - reconnects['first_s']:.1f} s {reconnects['counts']}"
                 if reconnects else ""))
    print(f"wall {results['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
