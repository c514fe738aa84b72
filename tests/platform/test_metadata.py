"""Pod and namespace metadata (``exporter.kube.metadata``) mirrored from the REAL API server.

Moved here from tests/kube/test_metadata.py, where a fake API server stood in for Kubernetes: what
is proven is our reading of the API (a node's pods by field selector, one list and then only the
watch, labels changed by strategic-merge and merge patches, the namespace label the server adds
itself, container IDs from the status a kubelet writes, deletions), so the judge is the real server.

The node is one no kwok node answers for: the test plays its kubelet, writing the pods' status
(container IDs of init and app containers) through the status subresource as a kubelet does, and
deleting them the way a kubelet confirms a deletion (grace period 0). A bound pod deleted with a
grace period would stay Terminating here forever: no kubelet confirms it, and the exporter keeps
its labels meanwhile (the GPU is still held until the containers are gone).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from devcluster.api import Api
from devcluster.control_plane import Cluster
from exporter.kube.metadata import KubernetesMetadata, WatchTimeouts
from tests.platform.support import bound_pod, delete_namespaces, delete_now, ensure_namespace, poll

NODE = "metadata-node"  # no Node object: nothing but this test writes the status of its pods
SERIAL = itertools.count()
TRAINER_CID, SHIPPER_CID = "ab" * 32, "cd" * 32
TIMEOUTS = WatchTimeouts(backoff_initial_s=0.2, backoff_max_s=1.0)
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass
class Watched:
    metadata: KubernetesMetadata
    ml: str  # this test's namespaces (one set per test: the cluster is the session's)
    web: str

    def pods(self) -> list[tuple[str, str]]:
        return sorted(key for key in self.metadata.view().pods_by_name if key[0] == self.ml)


@pytest.fixture
def watched(cluster: Cluster, admin: Api) -> Iterator[Watched]:
    serial = next(SERIAL)
    ml, web = f"meta-ml-{serial}", f"meta-web-{serial}"
    ensure_namespace(admin, ml, {"team": "research"})
    ensure_namespace(admin, web)
    bound_pod(admin, ml, "trainer-0", NODE, labels={"app": "trainer", "team": "vision"},
              containers={"main": "containerd://" + TRAINER_CID}, sidecars={"log-shipper": "cri-o://" + SHIPPER_CID})
    bound_pod(admin, ml, "elsewhere", "cpu-2")
    watcher = KubernetesMetadata(NODE, kubeconfig=str(cluster.kubeconfig), timeouts=TIMEOUTS)
    watcher.start()
    try:
        poll("the initial sync, both watches held", lambda: watcher.synced and watcher.state.up, deadline_s=60)
        yield Watched(watcher, ml, web)
    finally:
        watcher.stop()
        delete_namespaces(admin, NODE, ml, web)  # no kubelet here confirms a graceful deletion


def test_lists_then_watches_only_this_nodes_pods(admin: Api, watched: Watched) -> None:
    metadata, ml, web = watched.metadata, watched.ml, watched.web
    view = metadata.view()
    assert watched.pods() == [(ml, "trainer-0")]  # not "elsewhere": the field selector, applied by the server
    pod = view.pods_by_name[(ml, "trainer-0")]
    assert pod.label_map == {"app": "trainer", "team": "vision"}
    assert pod.uid and view.pods_by_uid[pod.uid] is pod
    assert view.containers_by_id[TRAINER_CID] == (pod, "main")
    assert view.containers_by_id[SHIPPER_CID] == (pod, "log-shipper")  # sidecar statuses count too
    # the server labels every namespace with its name itself
    assert view.namespace_labels(ml) == {"kubernetes.io/metadata.name": ml, "team": "research"}

    bound_pod(admin, ml, "eval", NODE, labels={"app": "eval"})
    poll("the new pod", lambda: (ml, "eval") in metadata.view().pods_by_name)
    admin.request("PATCH", f"/api/v1/namespaces/{ml}/pods/eval", {"metadata": {"labels": {"team": "nlp"}}},
                  STRATEGIC)
    poll("the relabel", lambda: metadata.view().pods_by_name[(ml, "eval")].label_map == {"app": "eval", "team": "nlp"})
    delete_now(admin, ml, "eval")
    poll("the deletion", lambda: (ml, "eval") not in metadata.view().pods_by_name)
    admin.request("PATCH", f"/api/v1/namespaces/{web}", {"metadata": {"labels": {"team": "frontend"}}},
                  "application/merge-patch+json")
    poll("the namespace label", lambda: (metadata.view().namespace_labels(web) or {}).get("team") == "frontend")

    # one list per resource; everything else came through the watches
    requests = dict(metadata.counters.requests())
    assert {key: count for key, count in requests.items() if key[1] == "list"} == {
        ("namespaces", "list", "200"): 1, ("pods", "list", "200"): 1}
    assert dict(metadata.counters.relists()) == {("namespaces", "initial"): 1, ("pods", "initial"): 1}


def test_a_bound_pod_deleted_with_a_grace_period_keeps_its_labels_until_it_is_gone(
        admin: Api, watched: Watched) -> None:
    """A real difference from the fake, which deletes at once: the server marks the pod
    (deletionTimestamp) and keeps it until its kubelet confirms; the exporter keeps attributing it
    meanwhile, and drops it at the confirmation."""
    metadata, ml = watched.metadata, watched.ml
    admin.request("DELETE", f"/api/v1/namespaces/{ml}/pods/trainer-0",
                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30})
    assert admin.get(f"/api/v1/namespaces/{ml}/pods/trainer-0")["metadata"]["deletionTimestamp"]
    # events arrive in order: once a pod created after the mark is seen, the mark has been seen too
    bound_pod(admin, ml, "marker", NODE)
    poll("a pod created after the deletion mark", lambda: (ml, "marker") in metadata.view().pods_by_name)
    assert metadata.view().pods_by_name[(ml, "trainer-0")].label_map["app"] == "trainer"
    assert TRAINER_CID in metadata.view().containers_by_id
    delete_now(admin, ml, "trainer-0")
    poll("the pod gone", lambda: watched.pods() == [(ml, "marker")])
