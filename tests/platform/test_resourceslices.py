"""ResourceSlices (``exporter.kube.resourceslices``) as the REAL API server serves them in each
``resource.k8s.io`` version the exporter reads: v1, and v1beta2 and v1beta1, which clusters of
Kubernetes 1.32 and 1.33 serve instead (``scripts/cluster`` turns those two on).

One slice, shaped as NVIDIA's DRA driver publishes it (``simulator.dra_devices``) and
created through v1, is read back through every version: the fake API server's rendering of each
version (``served``: v1beta1 keeps a device's attributes under ``basic``) must be the real one, and
the exporter must read the same devices from each. The unit tests of the version handling
(tests/kube/test_dra.py) feed the fake's rendering, so this is what makes them evidence.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devcluster.api import Api
from devcluster.control_plane import Cluster
from exporter.kube.resourceslices import SliceCache, slice_from_json
from simulator.dra_devices import DRIVER, gpu_device, mig_device
from simulator.fakeapiserver import SLICE_VERSIONS, resource_slice, served
from tests.kube.helpers import GPU1, GPU2, MIG_A

NODE = "slices-node"  # no Node object: the slice's node and pool only
NAME = f"{NODE}-gpus"
PUBLISHED = resource_slice(NAME, DRIVER, NODE, [gpu_device(1, GPU1), mig_device(2, GPU2, MIG_A, "3g.40gb", 3)],
                           node_name=NODE)


@pytest.fixture(scope="module")
def created(cluster: Cluster, admin: Api) -> Iterator[None]:
    admin.create("/apis/resource.k8s.io/v1/resourceslices", PUBLISHED)
    try:
        yield
    finally:
        admin.delete(f"/apis/resource.k8s.io/v1/resourceslices/{NAME}")


@pytest.mark.parametrize("version", SLICE_VERSIONS)
def test_every_version_serves_the_devices_as_the_fake_does_and_the_exporter_reads_them_alike(
        admin: Api, created: None, version: str) -> None:
    real = admin.get(f"/apis/resource.k8s.io/{version}/resourceslices/{NAME}")
    assert real["apiVersion"] == f"resource.k8s.io/{version}"
    assert real["spec"]["devices"] == served(PUBLISHED, version)["spec"]["devices"]
    # the node's share, as the exporter's watch asks for it
    listed = admin.get(f"/apis/resource.k8s.io/{version}/resourceslices?fieldSelector=spec.nodeName%3D{NODE}")
    assert [item["metadata"]["name"] for item in listed["items"]] == [NAME]

    cache = SliceCache()
    cache.replace([slice_from_json(real)])
    view = cache.view()
    gpu = view.get(DRIVER, NODE, "gpu-1")
    assert gpu is not None and (gpu.type, gpu.uuid) == ("gpu", GPU1)
    mig = view.get(DRIVER, NODE, "gpu-2-mig-3g40gb-3")
    assert mig is not None and (mig.type, mig.uuid, mig.parent_uuid, mig.profile) == ("mig", MIG_A, GPU2, "3g.40gb")
