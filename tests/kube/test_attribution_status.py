"""The facade's status carries the API watches' request and relist counts (the self-metrics behind
kube API request and relist rates), read from the real fake API server of tests/kube/test_attribution.py."""

from __future__ import annotations

from exporter.kube.attribution import KubernetesAttribution

from .helpers import DEVICES, MIGS, poll
from .test_attribution import FAST, Cluster, _ready, cluster

__all__ = ["cluster"]  # the fake kubelet, API server and /proc of test_attribution.py


def test_the_status_counts_the_api_requests_and_relists(cluster: Cluster) -> None:
    attribution = KubernetesAttribution(cluster.config, watch_timeouts=FAST)
    attribution.start()
    try:
        poll(lambda: _ready(attribution), what="kubelet and API data joined")
        status = attribution.snapshot(DEVICES, MIGS).status
    finally:
        attribution.stop()
    requests = dict(status.api_requests)
    assert {key: count for key, count in requests.items() if key[1] == "list"} == {
        ("namespaces", "list", "200"): 1, ("pods", "list", "200"): 1}
    assert requests[("namespaces", "watch", "200")] >= 1 and requests[("pods", "watch", "200")] >= 1
    assert dict(status.api_relists) == {("namespaces", "initial"): 1, ("pods", "initial"): 1}
