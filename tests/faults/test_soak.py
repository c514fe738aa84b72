"""Continuous pod churn under a steady scrape load: the exporter's memory stays flat.

The bounded CI version of ``python -m bench.soak soak`` (10 minutes there at 10 pods per second,
RSS compared with minute 1 against the issue's 10 %; docs/load-and-soak.md has the figures). Here:
40 s of churn at 50 pods replaced per second on a 110-pod node (GPU pods included, their processes
moving to the new pods), four scrapes per second, RSS sampled every 5 s. The faster churn packs
2,000 pods into a CI-sized run.

Why a reference after a warm-up, and why TOLERANCE_KIB: CPython's allocator and glibc keep freed
memory, so RSS rises while the first generations of pods pass through the caches, then levels off
(with an occasional step when the heap grows by an arena). A leak instead grows with the number of
pods seen. Measured on the 2-core dev machine with this test's settings (1,500 pods replaced
between the 10 s reference and the end): +0.5 and +0.4 MiB in two clean runs; +4.6 MiB with an
injected leak that keeps each deleted pod's metadata (``MetadataCache.delete_pod`` appending the
pod to a list). The pods carry the ten labels a Helm-deployed pod typically has, so a leak of pod
objects is big enough to see. 2 MiB sits between the two and leaves room for one heap step
(+0.9 MiB seen once in a 10-minute run with the old API client). The issue's 10 % of ~59 MiB (~6 MiB) is the bench's
criterion over 10 minutes; in 40 s it could not catch this leak.
"""

from __future__ import annotations

import pytest

from bench.soak import KIB, run_soak, soak_report

pytestmark = pytest.mark.e2e

DURATION_S = 40.0
REFERENCE_S = 10.0
PODS_PER_S = 50
TOLERANCE_KIB = 2 * KIB


def test_rss_stays_flat_under_continuous_pod_churn() -> None:
    run = run_soak(duration_s=DURATION_S, reference_s=REFERENCE_S, churn_per_step=PODS_PER_S)
    report = soak_report(run)
    print(report)  # the measurement, visible with pytest -s
    assert run.pods_replaced >= PODS_PER_S * DURATION_S * 0.9  # the churn really ran
    assert run.scrape_failures == 0 and run.scrapes > 0
    assert run.stale_series == 0  # no series names a deleted pod
    assert run.healthy_after
    assert run.log_problems == []
    assert run.rss_end_kib - run.rss_reference_kib <= TOLERANCE_KIB, report
