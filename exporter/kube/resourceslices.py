"""This node's DRA ResourceSlices: what each ``(driver, pool, device)`` a claim names really is.

The kubelet's PodResources answer names a DRA device only by its driver, pool and device name
(``gpu.nvidia.com`` / ``node-a`` / ``gpu-3``); which GPU that is, the driver publishes in
``resource.k8s.io`` ResourceSlice objects, as device attributes. NVIDIA's DRA driver publishes one
device per GPU (``gpu-<minor>``: ``type`` gpu, ``uuid`` GPU-...) and per MIG device
(``gpu-<minor>-mig-<profile>-<profile id>-<placement>``: ``type`` mig, ``uuid`` MIG-..., ``parentUUID``,
``profile`` such as ``1g.10gb``), plus product name, architecture and versions we do not need.

One watch (``exporter.kube.reflector``: list, then watch, bookmarks, cache-served relists, jittered
backoff, Retry-After, counters) follows the slices of this node only (``fieldSelector=spec.nodeName=
<node>``; a GPU is node-local, and a fleet must not mirror every node's slices on every node). It
asks for ``resource.k8s.io/v1`` (Kubernetes 1.34+) and falls back to ``v1beta2`` and ``v1beta1`` when
the server answers 404; the JSON differs only in where a device's attributes sit (``v1beta1``:
``devices[].basic.attributes``, later versions: ``devices[].attributes``), and both shapes are read
whichever version answered.

A pool may be split across several slices and republished under a higher ``pool.generation``;
consumers must use only the slices of a pool's highest generation (the API's own rule), so an
older slice still lingering during an update does not name a device twice. While the API fails,
the last mirrored slices keep resolving claims for at most ``stale_after_s``, like the pod
metadata; then they are dropped (``SliceCache.clear``) and relisted on recovery.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from exporter.kube.reflector import ApiCounters, ApiRequests, ApiState, WatchedResource, WatchGroup, WatchTimeouts

API_GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # newest first: v1 since Kubernetes 1.34, v1beta2 1.33, v1beta1 1.32
RESOURCE = "resourceslices"
RBAC_HINT = ("get/list/watch resourceslices in API group resource.k8s.io; the chart grants it with "
             "kubernetesDRA.enabled")
ABSENT_HINT = ("the API server serves none of resource.k8s.io v1, v1beta2, v1beta1: DRA is not enabled in this "
               "cluster; turn --kubernetes-enable-dra off, or enable DRA")


def resource_path(version: str) -> str:
    return f"/apis/{API_GROUP}/{version}/{RESOURCE}"


@dataclass(frozen=True)
class PublishedDevice:
    """One device of a slice, with the attributes attribution reads (empty when not published)."""

    driver: str
    pool: str
    name: str
    type: str = ""  # "gpu", "mig", ... (NVIDIA's driver; other drivers may publish none)
    uuid: str = ""  # GPU-<uuid> or MIG-<uuid>
    parent_uuid: str = ""  # a MIG device's GPU
    profile: str = ""  # a MIG device's profile, e.g. 1g.10gb

    @property
    def triple(self) -> tuple[str, str, str]:
        return self.driver, self.pool, self.name


@dataclass(frozen=True)
class SliceContent:
    """What one ResourceSlice says, reduced to what attribution needs."""

    name: str
    driver: str
    pool: str
    generation: int
    node: str
    devices: tuple[PublishedDevice, ...] = ()


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"ResourceSlice without {what}")
    return value


def attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str:
    """An attribute's value as text. Names without a domain belong to the driver's domain, so
    ``uuid`` and ``gpu.nvidia.com/uuid`` are the same attribute (resource.k8s.io QualifiedName)."""
    for key in (name, f"{driver}/{name}"):
        value = attributes.get(key)
        if not isinstance(value, dict):
            continue
        for kind in ("string", "version"):
            if isinstance(value.get(kind), str):
                return str(value[kind])
        if isinstance(value.get("int"), int) and not isinstance(value.get("int"), bool):
            return str(value["int"])
    return ""


def slice_from_json(obj: Mapping[str, Any]) -> SliceContent:
    """Keep what attribution needs from a ResourceSlice (any served version); ValueError when malformed."""
    metadata = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        raise ValueError("ResourceSlice without metadata or spec")
    name = _text(metadata.get("name"), "metadata.name")
    driver = _text(spec.get("driver"), "spec.driver")
    pool = spec.get("pool")
    if not isinstance(pool, dict):
        raise ValueError(f"ResourceSlice {name} without spec.pool")
    pool_name = _text(pool.get("name"), "spec.pool.name")
    generation = pool.get("generation", 0)
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise ValueError(f"ResourceSlice {name}: spec.pool.generation is not an integer")
    devices: list[PublishedDevice] = []
    for item in spec.get("devices") or ():
        if not isinstance(item, dict):
            raise ValueError(f"ResourceSlice {name}: a device is not an object")
        device_name = _text(item.get("name"), "spec.devices[].name")
        basic = item.get("basic")  # v1beta1 nests attributes under "basic"
        holder = basic if isinstance(basic, dict) else item
        attributes = holder.get("attributes") or {}
        if not isinstance(attributes, dict):
            raise ValueError(f"ResourceSlice {name}: attributes of {device_name} are not an object")
        devices.append(PublishedDevice(
            driver=driver, pool=pool_name, name=device_name, type=attribute(attributes, driver, "type"),
            uuid=attribute(attributes, driver, "uuid"), parent_uuid=attribute(attributes, driver, "parentUUID"),
            profile=attribute(attributes, driver, "profile")))
    node = spec.get("nodeName")
    return SliceContent(name=name, driver=driver, pool=pool_name, generation=generation,
                        node=str(node) if isinstance(node, str) else "", devices=tuple(devices))


@dataclass(frozen=True)
class SliceView:
    """The mirror as an immutable value: devices by ``(driver, pool, device)``, current pool generations only.

    ``synced`` is False until a list succeeded, and again after the mirror was dropped (a long API
    outage): then a missing device is no evidence that its slice is missing.
    """

    version: int = 0
    synced: bool = False
    devices: Mapping[tuple[str, str, str], PublishedDevice] = field(default_factory=lambda: MappingProxyType({}))
    slices: int = 0

    def get(self, driver: str, pool: str, device: str) -> PublishedDevice | None:
        return self.devices.get((driver, pool, device))


EMPTY_VIEW = SliceView()


class SliceCache:
    """ResourceSlices by name; thread-safe; versioned on real changes only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, SliceContent] = {}
        self._synced = False
        self._version = 0
        self._view = EMPTY_VIEW

    def replace(self, slices: list[SliceContent]) -> bool:
        with self._lock:
            wanted = {item.name: item for item in slices}
            if wanted == self._slices and self._synced:
                return False
            self._slices, self._synced = wanted, True
            self._version += 1
            return True

    def upsert(self, item: SliceContent) -> bool:
        with self._lock:
            if self._slices.get(item.name) == item:
                return False
            self._slices[item.name] = item
            self._version += 1
            return True

    def delete(self, name: str) -> bool:
        with self._lock:
            if self._slices.pop(name, None) is None:
                return False
            self._version += 1
            return True

    def clear(self) -> bool:
        """Forget every slice (mirrored too long ago to trust); the next list fills it again."""
        with self._lock:
            if not self._slices and not self._synced:
                return False
            self._slices, self._synced = {}, False
            self._version += 1
            return True

    def view(self) -> SliceView:
        with self._lock:
            if self._view.version != self._version:
                newest: dict[tuple[str, str], int] = {}
                for item in self._slices.values():
                    key = (item.driver, item.pool)
                    newest[key] = max(newest.get(key, item.generation), item.generation)
                devices = {device.triple: device for item in sorted(self._slices.values(), key=lambda s: s.name)
                           if item.generation == newest[(item.driver, item.pool)] for device in item.devices}
                self._view = SliceView(version=self._version, synced=self._synced,
                                       devices=MappingProxyType(devices), slices=len(self._slices))
            return self._view


class _SliceDecoder:
    """ResourceSlice list and events -> ``SliceCache`` (a ``reflector.Decoder``)."""

    def __init__(self, cache: SliceCache, changed: Callable[[bool], None]) -> None:
        self._cache = cache
        self._changed = changed

    def replace(self, items: list[Mapping[str, Any]]) -> None:
        self._changed(self._cache.replace([slice_from_json(item) for item in items]))

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        item = slice_from_json(obj)
        if event_type == "DELETED":
            self._changed(self._cache.delete(item.name))
        else:
            self._changed(self._cache.upsert(item))


class ResourceSliceWatch:
    """The watch of this node's ResourceSlices and the mirror it fills (see the module docstring).

    It runs in its own ``WatchGroup``, so ``gpu_pod_exporter_kube_api_up`` keeps meaning "pods and
    namespaces are watched" and a cluster that serves no DRA API, or RBAC without resourceslices,
    shows as ``gpu_pod_exporter_dra_resourceslices_up`` 0 with one log line naming the cause, not as a
    broken pod watch. ``on_change`` fires when the mirrored content or the up/down condition changed.
    """

    def __init__(self, node_name: str, on_change: Callable[[], None] = lambda: None, *,
                 timeouts: WatchTimeouts | None = None, monotonic: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 random_fraction: Callable[[], float] = random.random) -> None:
        self.node_name = node_name
        self.cache = SliceCache()
        self._on_change = on_change
        self.group = WatchGroup(node=node_name, description=f"DRA ResourceSlices of node {node_name}",
                                timeouts=timeouts or WatchTimeouts(), on_change=on_change, on_stale=self.cache.clear,
                                monotonic=monotonic, wall_clock=wall_clock, random_fraction=random_fraction)
        self._not_configured: ApiState | None = None
        self._started = False

    @property
    def resource(self) -> WatchedResource:
        return WatchedResource(RESOURCE, resource_path(VERSIONS[0]), field_selector=f"spec.nodeName={self.node_name}",
                               alternatives=tuple(resource_path(version) for version in VERSIONS[1:]),
                               rbac_hint=RBAC_HINT, absent_hint=ABSENT_HINT)

    @property
    def state(self) -> ApiState:
        return self._not_configured or self.group.state

    @property
    def counters(self) -> ApiCounters:
        return self.group.counters

    def view(self) -> SliceView:
        return self.cache.view()

    def start(self, api: ApiRequests | None, error: str = "") -> None:
        """Start watching through ``api`` (the pod watch's connection); None: the API is not
        configured (``error`` says why), and the state says so."""
        if self._started:
            return
        if api is None:
            self._not_configured = ApiState(up=False, error=error or "Kubernetes API not configured",
                                            error_kind="not-configured")
            return
        self._started = True
        self.group.add(self.resource, api, _SliceDecoder(self.cache, self._changed))
        self.group.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self.group.stop(timeout_s)

    def _changed(self, changed: bool) -> None:
        if changed:
            self._on_change()
