"""The list+watch loop in each failure mode of a large cluster's API server, one exporter at a time.

Time is shrunk (windows of 20 ms to 200 ms instead of 1 s to 60 s); the real defaults' arithmetic is
tested in test_backoff.py, and a fleet of 50 exporters goes through every phase in test_fleet.py.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from exporter.kube.metadata import KubernetesMetadata
from exporter.kube.reflector import ApiCounters, Reflector, WatchedResource, WatchTimeouts
from simulator.fakeapiserver import FakeApiServer

from .helpers import poll

NODE = "node-a"
SHRUNK = WatchTimeouts(connect_s=1.0, list_read_s=1.0, watch_s=30, watch_read_slack_s=1.0,
                       backoff_initial_s=0.02, backoff_max_s=0.2, backoff_reset_s=5.0, stale_after_s=60.0)
LOGGER = "gpu_pod_exporter.kube.api"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(NODE, bookmark_interval_s=0.05).start()
    server.add_namespace("ml", {"team": "research"})
    server.add_pod("ml", "trainer-0", labels={"app": "trainer"})
    yield server
    server.stop()


@pytest.fixture
def exporter(api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[KubernetesMetadata]:
    caplog.set_level(logging.INFO, logger=LOGGER)
    watcher = KubernetesMetadata(NODE, kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
                                 timeouts=SHRUNK)
    watcher.start()
    poll(lambda: watcher.state.up and all(r.status.settled for r in watcher.reflectors), what="initial sync")
    # the "API up" line is logged just after the state turns up: wait for it here, so a test's own
    # lines (caplog keeps each phase apart) never include the start-up's
    poll(lambda: any(m.startswith("Kubernetes API up") for m in _lines(caplog)), what="the start-up to be logged")
    yield watcher
    watcher.stop()


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


def test_410_forever_costs_a_few_requests_per_window_and_one_log_line(
        api: FakeApiServer, exporter: KubernetesMetadata, caplog: pytest.LogCaptureFixture) -> None:
    """The failure reported in issue 15: 414 requests in 5 s and 45 log lines a second. Now one
    relist (a list and a watch) per resource per backoff window, and one line for the whole storm."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    started = api.records()[-1].at if api.records() else 0.0
    storm = [record.at for record in api.records()]
    begin = max(storm) if storm else started
    api.set_gone_storm(True)
    poll(lambda: not exporter.state.up, what="the first 410 to be noticed")
    down_samples: list[bool] = []

    def enough_relists() -> bool:
        down_samples.append(not exporter.state.up)
        return all(count >= 7 for (_, reason), count in exporter.counters.relists() if reason == "expired") and \
            len([1 for (_, reason), _ in exporter.counters.relists() if reason == "expired"]) == 2

    poll(enough_relists, timeout_s=30, what="seven relists of each resource")
    records = api.records(since=begin)
    elapsed = records[-1].at - begin
    policy = SHRUNK.backoff_policy()
    for resource in ("pods", "namespaces"):
        sent = [r for r in records if r.resource == resource]
        assert len(sent) <= 2 * policy.max_attempts(elapsed), (resource, len(sent), elapsed)
    assert {r.verb for r in records} == {"list", "watch"}
    assert all(down_samples), down_samples  # once down, kube_api_up stays 0 through the whole storm
    assert exporter.state.error_kind == "gone"
    storm_lines = _lines(caplog)
    assert len(storm_lines) == 1, storm_lines  # many retries, one line
    assert "410 Gone" in storm_lines[0] and "; retry " in storm_lines[0]

    api.set_gone_storm(False)
    poll(lambda: exporter.state.up and exporter.state.error == "", timeout_s=10, what="recovery")
    poll(lambda: len(_lines(caplog)) == 2, what="the recovery line")
    assert _lines(caplog)[1].startswith("Kubernetes API up again after ")


def test_throttled_requests_wait_for_retry_after(api: FakeApiServer, exporter: KubernetesMetadata) -> None:
    begin = api.records()[-1].at
    api.set_throttle(0.4)
    api.cut_watches()
    poll(lambda: len([r for r in api.records(since=begin) if r.resource == "pods" and r.status == 429]) >= 4,
         what="four throttled pods requests")
    sent = [r for r in api.records(since=begin) if r.resource == "pods"]
    gaps = [later.at - earlier.answered_at for earlier, later in itertools.pairwise(sent)
            if earlier.status == 429]
    assert len(gaps) >= 3 and min(gaps) >= 0.39, gaps  # never sooner than the server asked
    assert exporter.state.error_kind == "http-429" and "Retry-After 0.4 s" in exporter.state.error
    api.set_throttle(None)
    poll(lambda: exporter.state.up, timeout_s=10, what="recovery")
    codes = {code for (resource, verb, code), _ in exporter.counters.requests() if resource == "pods"}
    assert codes == {"200", "429"}


def test_relists_come_from_the_watch_cache_and_a_reset_store_gets_a_consistent_read(
        api: FakeApiServer, exporter: KubernetesMetadata) -> None:
    lists = [query for verb, resource, query in api.requests if verb == "list" and resource == "pods"]
    assert lists == [{"fieldSelector": f"spec.nodeName={NODE}", "resourceVersion": "0"}]  # any state the cache has
    synced = int(exporter.reflectors[0]._synced_version)

    def pods_verbs() -> list[str]:
        return [verb for verb, resource, _ in list(api.requests) if resource == "pods"]

    api.expire_history()  # 410 Gone: relist, not older than what we had, still from the cache
    # The relist is done once the watch after it is asked for (a watch starts only after its list's
    # answer was read in full): a restart while the list's answer is on the wire would cut the relist
    # itself, and the next try would find nothing too large for pods.
    poll(lambda: pods_verbs().count("list") == 2 and pods_verbs()[-1] == "watch", what="the relist and its watch")
    relist = [query for verb, resource, query in api.requests if verb == "list" and resource == "pods"][-1]
    assert relist["resourceVersionMatch"] == "NotOlderThan" and int(relist["resourceVersion"]) >= synced
    assert api.list_reads["consistent"] == 0

    api.too_large_retry_after_s = 0.1
    api.restart(reset_resource_versions=True)  # versions start over: what we hold is "too large"
    poll(lambda: exporter.state.up and ("pods", "too-large") in dict(exporter.counters.relists())
         and api.list_reads["consistent"] >= 1, timeout_s=10, what="the pods relist after the reset, consistent")
    relists = dict(exporter.counters.relists())
    assert relists[("pods", "too-large")] >= 1 and relists[("pods", "expired")] == 1
    assert ("pods", "watch", "504") in dict(exporter.counters.requests())
    api.add_pod("ml", "after-reset")
    poll(lambda: ("ml", "after-reset") in exporter.view().pods_by_name, what="events after the reset")


def test_500s_log_one_line_down_and_one_up(api: FakeApiServer, exporter: KubernetesMetadata,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    api.set_outage("500")
    poll(lambda: exporter.state.retries >= 5, what="five failed attempts")
    assert not exporter.state.up and exporter.state.error_kind == "http-500"
    api.set_outage(None)
    poll(lambda: exporter.state.up and exporter.state.error == "", timeout_s=10, what="recovery")
    poll(lambda: len(_lines(caplog)) == 2, what="the recovery line")
    down, up = _lines(caplog)
    assert "answered 500" in down and re.search(r"; retry \d+ in \d+\.\d s$", down)
    assert up.startswith("Kubernetes API up again after ")
    assert dict(exporter.counters.requests())[("pods", "watch", "500")] >= 1


def test_requests_name_the_exporter_and_its_node(api: FakeApiServer, exporter: KubernetesMetadata) -> None:
    assert {record.user_agent for record in api.records()} == {"gpu-pod-exporter/0.1.0 node/node-a"}
    counts = dict(exporter.counters.requests())
    assert counts[("pods", "list", "200")] == 1 and counts[("namespaces", "list", "200")] == 1
    assert dict(exporter.counters.relists()) == {("namespaces", "initial"): 1, ("pods", "initial"): 1}


class _EndsAtOnce:
    """A transport whose lists are empty and whose watches end as soon as they open."""

    def __init__(self) -> None:
        self.watches: list[dict[str, str]] = []

    def get(self, path: str, query: Sequence[tuple[str, str]], timeout: Any) -> Any:
        parameters = dict(query)
        if parameters.get("watch") == "true":
            self.watches.append(parameters)
            return _Response(b"")
        return _Response(json.dumps({"metadata": {"resourceVersion": "7"}, "items": []}).encode())


class _Response:
    status = 200

    def __init__(self, body: bytes) -> None:
        self.data = body

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from ([self.data] if self.data else [])

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Ignore:
    def replace(self, items: list[Any]) -> None:
        pass

    def apply(self, event_type: str, obj: Any) -> None:
        pass


def test_watch_timeouts_are_jittered_and_early_ends_are_paced() -> None:
    """After an API server restart every node reconnects at about the same time; timeouts drawn
    from [5 min, 10 min) keep them from reconnecting together again five minutes later."""
    transport = _EndsAtOnce()
    reflector = Reflector(WatchedResource("pods", "/api/v1/pods"), transport, _Ignore(),
                          timeouts=WatchTimeouts(backoff_initial_s=0.001, backoff_max_s=0.004),
                          counters=ApiCounters())
    reflector.start()
    try:
        poll(lambda: len(transport.watches) >= 40, what="forty watches")
    finally:
        reflector.stop()
        reflector.join(5)
    timeouts = [int(watch["timeoutSeconds"]) for watch in transport.watches]
    assert all(300 <= timeout < 600 for timeout in timeouts)
    assert len(set(timeouts)) >= 20
    assert reflector.status.episode is not None and reflector.status.episode.kind == "ended-early"
    # every early end waited for its window (the last watch may still have been open at stop())
    assert reflector.backoff.failures >= len(transport.watches) - 1


def test_every_watched_resource_has_a_bookmark_count_before_its_first_bookmark(
        exporter: KubernetesMetadata) -> None:
    """The counter's series exist at 0 from the start, so ``rate()`` works from the first bookmark
    and the set of series a scrape shows does not depend on whether a bookmark has come yet (red in
    CI: one Prometheus had seen a real API server's first bookmark, the other not yet)."""
    assert dict(exporter.counters.bookmarks()) == {"pods": 0, "namespaces": 0}


def test_bookmarks_are_counted_per_resource_and_cost_no_request(api: FakeApiServer,
                                                                 exporter: KubernetesMetadata) -> None:
    """What ``gpu_pod_exporter_kube_api_bookmarks_total`` counts (the real server's bookmarks and
    the resume from them: tests/platform/test_reflector.py)."""
    before = dict(exporter.counters.bookmarks())
    requests = sum(count for _, count in exporter.counters.requests())
    api.send_bookmarks()
    poll(lambda: all(dict(exporter.counters.bookmarks()).get(resource, 0) > before.get(resource, 0)
                     for resource in ("pods", "namespaces")), what="bookmarks of both watches counted")
    assert set(dict(exporter.counters.bookmarks())) == {"pods", "namespaces"}
    assert sum(count for _, count in exporter.counters.requests()) == requests  # a bookmark arrives on the open watch
