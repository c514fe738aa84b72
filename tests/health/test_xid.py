"""The Xid ledger: exact totals, last value, sliding window with an injected clock, fatal-class lookup."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from exporter.health.xid import XidLedger, XidSource
from exporter.xid_codes import FATAL_XIDS, xid_message
from tests.simulator.conftest import FixedClock

GPU0 = XidSource("GPU-0")
GPU1 = XidSource("GPU-1")


def test_before_any_xid_the_last_value_is_zero() -> None:
    view = XidLedger(300.0).view()
    assert view.last_xid("GPU-0") == 0 and view.tallies == {}
    assert xid_message(0) == "No Error"


def test_totals_count_every_event_of_a_storm_from_many_threads() -> None:
    ledger = XidLedger(300.0)

    def storm(source: XidSource, xid: int, count: int) -> None:
        for _ in range(count):
            ledger.record(source, xid)

    plan = ((GPU0, 31, 500), (GPU0, 43, 300), (GPU1, 13, 700))
    threads = [threading.Thread(target=storm, args=args) for args in plan]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    view = ledger.view()
    assert dict(view.tallies[GPU0].totals) == {31: 500, 43: 300}
    assert dict(view.tallies[GPU1].totals) == {13: 700}
    assert dict(view.tallies[GPU1].in_window) == {13: 700}


def test_the_window_count_decays_after_the_window_while_totals_stay() -> None:
    clock = FixedClock(100.0)
    ledger = XidLedger(10.0, clock)
    ledger.record(GPU0, 13, count=3)
    clock.t = 104.0
    ledger.record(GPU0, 13, count=2)
    assert ledger.view().tallies[GPU0].in_window[13] == 5
    clock.t = 109.999
    assert ledger.view().tallies[GPU0].in_window[13] == 5
    clock.t = 110.0  # the first three are exactly one window old
    assert ledger.view().tallies[GPU0].in_window[13] == 2
    clock.t = 114.0
    tally = ledger.view().tallies[GPU0]
    assert dict(tally.in_window) == {13: 0} and dict(tally.totals) == {13: 5}
    assert tally.last_xid == 13


def test_the_last_xid_of_a_gpu_is_the_latest_over_all_its_instances() -> None:
    ledger = XidLedger(300.0)
    ledger.record(GPU0, 13)
    ledger.record(XidSource("GPU-0", 2, 0), 94)
    ledger.record(GPU1, 31)
    view = ledger.view()
    assert view.last_xid("GPU-0") == 94 and view.last_xid("GPU-1") == 31
    ledger.record(GPU0, 43)
    assert ledger.view().last_xid("GPU-0") == 43


def test_recent_fatal_xids_are_those_of_the_fatal_class_within_the_window() -> None:
    clock = FixedClock()
    ledger = XidLedger(60.0, clock)
    ledger.record(GPU0, 13)  # an application fault
    assert ledger.view().recent("GPU-0") == ()
    ledger.record(XidSource("GPU-0", 1, 0), 94)  # inside a MIG instance: still this GPU
    ledger.record(GPU0, 79)
    assert ledger.view().recent("GPU-0") == (79, 94)
    assert ledger.view().recent("GPU-1") == ()
    clock.t = 60.0
    assert ledger.view().recent("GPU-0") == ()


def test_xid_zero_is_not_an_error_and_is_not_counted() -> None:
    ledger = XidLedger(300.0)
    ledger.record(GPU0, 0)
    assert ledger.view().tallies == {}


def alert_rule_xids() -> set[int]:
    """The Xid codes the shipped alert rules page on (every ``xid=~"..."`` selector in the alerts file)."""
    text = (Path(__file__).resolve().parents[2] / "deploy" / "rules" / "gpu-pod-exporter-alerts.yaml").read_text()
    return {int(code) for regex in re.findall(r'xid=~"([0-9|]+)"', text) for code in regex.split("|")}


def test_the_fatal_class_matches_the_alert_rules_and_leaves_application_faults_out() -> None:
    assert alert_rule_xids() == FATAL_XIDS
    assert not {13, 31, 43, 45, 68, 109} & FATAL_XIDS
    assert xid_message(79) == "GPU has fallen off the bus"
    assert xid_message(12345) == "Unknown Error"


def test_xid_one_is_an_error_and_an_empty_burst_is_no_event() -> None:
    ledger = XidLedger(300.0)
    ledger.record(GPU0, 13, count=0)
    assert ledger.view().tallies == {}  # nothing happened: no series, no "last Xid"
    ledger.record(GPU0, 1)
    view = ledger.view()
    assert view.last_xid("GPU-0") == 1 and dict(view.tallies[GPU0].totals) == {1: 1}


def test_arrivals_within_ten_milliseconds_leave_the_window_together() -> None:
    """The documented bucketing: an arrival less than 10 ms after the bucket's first shares its time."""
    clock = FixedClock(0.0)
    ledger = XidLedger(10.0, clock)
    ledger.record(GPU0, 13)
    clock.t = 0.005
    ledger.record(GPU0, 13)  # same bucket as the first
    clock.t = 0.010
    ledger.record(GPU0, 13)  # 10 ms after the bucket's first: a bucket of its own
    clock.t = 10.0
    assert ledger.view().tallies[GPU0].in_window[13] == 1  # the first two left together
    clock.t = 10.02
    assert ledger.view().tallies[GPU0].in_window[13] == 0
    clock.t = 100.0  # and later in the run, the same holds
    ledger.record(GPU1, 31)
    clock.t = 100.005
    ledger.record(GPU1, 31)
    clock.t = 110.0
    assert ledger.view().tallies[GPU1].in_window[31] == 0
