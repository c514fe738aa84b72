"""``kubernetes.faults`` of a scenario: a simulated node whose kubelet or API server is broken.

What goes wrong on real nodes, each in one key (all optional)::

    kubernetes:
      faults:
        kubelet: missing          # no socket: the pod-resources directory is not mounted / kubelet down
                                  # wrong-socket: answers UNIMPLEMENTED (the device-plugin socket)
                                  # rate-limited: every List is RESOURCE_EXHAUSTED "rejected by rate limit"
        stray_device_ids: [GPU-<uuid>, nvidia7]   # IDs the kubelet hands to pod stray/stray-0 that name no
                                  # GPU the exporter sees (fewer GPUs visible to it, a GPU order mismatch)
        api_server: unreachable   # connection refused | unavailable (HTTP 503) | unauthorized (token rejected)
        forbidden: [namespaces]   # RBAC lacks these resources: 403 on list/watch, SelfSubjectAccessReview denies

The exporter meets them exactly as on a broken node (same clients, same error answers), and
``gpu-pod-exporter doctor`` names each with its fix. Validation errors name ``file:line`` and the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from exporter.safeyaml import YamlValue
from simulator.fakeapiserver import FakeApiServer
from simulator.fakekubelet import FakeContainer, FakeKubelet, FakePod

KUBELET_FAULTS = ("missing", "wrong-socket", "rate-limited")
API_SERVER_FAULTS = ("unreachable", "unavailable", "unauthorized")
FORBIDDABLE = ("pods", "namespaces")
STRAY_POD = ("stray", "stray-0")
REJECTED_TOKEN = "rotated-token-the-kubeconfig-does-not-have"  # noqa: S105 - a fake server's token


@dataclass(frozen=True)
class KubernetesFaults:
    kubelet: str | None = None
    stray_device_ids: tuple[str, ...] = ()
    api_server: str | None = None
    forbidden: tuple[str, ...] = ()

    @property
    def kubelet_runs(self) -> bool:
        return self.kubelet != "missing"


def parse_faults(value: YamlValue, string: Callable[..., str],
                 choice: Callable[[YamlValue, Any], Any]) -> KubernetesFaults:
    """``kubernetes.faults``, read with the section's own checks (``string``, ``choice``: file:line errors)."""
    fields = value.mapping(("kubelet", "stray_device_ids", "api_server", "forbidden"))
    kubelet = choice(fields["kubelet"], KUBELET_FAULTS) if "kubelet" in fields else None
    api = choice(fields["api_server"], API_SERVER_FAULTS) if "api_server" in fields else None
    stray = tuple(string(item, expected="a device ID")
                  for item in (fields["stray_device_ids"].sequence() if "stray_device_ids" in fields else []))
    forbidden = tuple(choice(item, FORBIDDABLE)
                      for item in (fields["forbidden"].sequence() if "forbidden" in fields else []))
    return KubernetesFaults(kubelet=kubelet, stray_device_ids=stray, api_server=api, forbidden=forbidden)


def stray_pod(faults: KubernetesFaults) -> FakePod | None:
    if not faults.stray_device_ids:
        return None
    devices = tuple(("nvidia.com/gpu", device_id) for device_id in faults.stray_device_ids)
    return FakePod(STRAY_POD[0], STRAY_POD[1], (FakeContainer("main", devices),))


def apply_kubelet_faults(faults: KubernetesFaults, kubelet: FakeKubelet) -> None:
    """Before the kubelet starts (``missing``: it is never started, so no socket exists)."""
    pod = stray_pod(faults)
    if pod is not None:
        kubelet.add_pod(pod)
    if faults.kubelet == "wrong-socket":
        kubelet.set_failure(grpc.StatusCode.UNIMPLEMENTED, "unknown service v1.PodResourcesLister")
    elif faults.kubelet == "rate-limited":
        kubelet.set_rate_limit(0.0, 0)


def apply_api_faults(faults: KubernetesFaults, apiserver: FakeApiServer) -> None:
    """After the API server started and the kubeconfig was written with its credentials."""
    for resource in faults.forbidden:
        apiserver.access.forbid(resource)
    if faults.api_server == "unauthorized":
        apiserver.token = REJECTED_TOKEN  # the kubeconfig keeps the old token: every request gets 401
    elif faults.api_server == "unavailable":
        apiserver.set_outage("503")
    elif faults.api_server == "unreachable":
        apiserver.set_outage("refuse")
