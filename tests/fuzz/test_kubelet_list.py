"""The kubelet's List answer: any bytes are a decode error (grpc reports it) or a canonical listing."""

from __future__ import annotations

import random

from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from exporter.kube.podresources import api_pb2
from exporter.kube.podresources.listing import gpu_resource_filter, listing_from_response
from tests.fuzz.inputs import within

ACCEPT = gpu_resource_filter(["example.com/gpu"])
names = st.one_of(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb",
                                   "example.com/gpu", "cpu"]), st.text(max_size=20))
devices = st.builds(lambda resource, ids: api_pb2.ContainerDevices(resource_name=resource, device_ids=ids),
                    names, st.lists(st.text(max_size=20), max_size=4))
containers = st.builds(lambda name, devs: api_pb2.ContainerResources(name=name, devices=devs),
                       st.text(max_size=12), st.lists(devices, max_size=3))
pods = st.builds(lambda name, namespace, cons: api_pb2.PodResources(name=name, namespace=namespace, containers=cons),
                 st.text(max_size=12), st.text(max_size=12), st.lists(containers, max_size=3))
# Pods are unique by namespace/name, as a kubelet lists them (a pod listed twice is merged, in the order
# seen: container order within a pod is the kubelet's, so only the order of pods is free).
responses = st.builds(lambda items: api_pb2.ListPodResourcesResponse(pod_resources=items),
                      st.lists(pods, max_size=6, unique_by=lambda pod: (pod.namespace, pod.name)))


@given(st.binary(max_size=2000))
def test_any_bytes_decode_to_a_listing_or_a_decode_error(raw: bytes) -> None:
    try:
        response = api_pb2.ListPodResourcesResponse.FromString(raw)
    except DecodeError:
        return  # grpc turns this into an RpcError, which the client reports as a failed List
    listing = within(10, lambda: listing_from_response(response, ACCEPT))
    assert listing.pods_listed == len(response.pod_resources)


@given(responses, st.randoms(use_true_random=False))
def test_any_answer_reduces_to_the_same_listing_in_any_order(response: api_pb2.ListPodResourcesResponse,
                                                              shuffle: random.Random) -> None:
    listing = listing_from_response(response, ACCEPT)
    items = list(response.pod_resources)
    shuffle.shuffle(items)
    again = listing_from_response(api_pb2.ListPodResourcesResponse(pod_resources=items), ACCEPT)
    assert again == listing
    for pod in listing.pods:
        for container in pod.containers:
            assert container.devices and all(ACCEPT(device.resource_name) for device in container.devices)
