"""Which GPU or MIG device a DRA claim's device is. Pure: no I/O, no clock.

The kubelet names a device a ResourceClaim gave a container by ``(driver, pool, device)``
(``podresources.listing.ClaimedDevice``); this node's ResourceSlices say what it is
(``resourceslices.PublishedDevice``: its ``uuid``, for a MIG device also ``parentUUID`` and
``profile``); NVML says which GPUs and MIG devices this node has (``deviceids.DeviceCatalog``).
Joining the three gives the ``GpuKey`` the renderer labels, or the reason it cannot be given:

* ``slice-missing``: no ResourceSlice of this node publishes the device (yet: a slice may appear
  after the pod started; or no longer);
* ``slices-unavailable``: the ResourceSlices are not mirrored (the watch has not listed them yet, or
  they were dropped after a long API outage), so nothing can be said about the slice;
* ``no-uuid``: its slice publishes the device without a ``uuid`` (a MIG device that is not created
  yet, a driver that publishes other attributes);
* ``not-on-node``: its ``uuid`` names no GPU or MIG device NVML shows here (a GPU bound to vfio-pci,
  MIG devices recreated since);
* ``driver-unknown``: a device of a driver not in ``--kubernetes-dra-driver-names`` that is a GPU of
  this node nonetheless (its slice's ``uuid`` or its CDI name names one): add the driver;
* ``cdi-only``: a 1.27-1.30 kubelet names the device only by CDI names (``vendor/class=name``), none
  of which carries a GPU UUID (NVIDIA's DRA driver names them ``k8s.gpu.nvidia.com/claim=<claim
  uid>-<device>``).

A device of another driver that names no GPU here (a network card's claim) is not a GPU: it is
ignored, not counted. None of these stops a GPU's own metrics; the GPU only stays unattributed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.kube.deviceids import DeviceCatalog, GpuKey, parse_device_id
from exporter.kube.podresources.listing import ClaimedDevice
from exporter.kube.resourceslices import SliceView

SLICE_MISSING = "slice-missing"
SLICES_UNAVAILABLE = "slices-unavailable"
NO_UUID = "no-uuid"
NOT_ON_NODE = "not-on-node"
DRIVER_UNKNOWN = "driver-unknown"
CDI_ONLY = "cdi-only"
REASONS = (SLICE_MISSING, SLICES_UNAVAILABLE, NO_UUID, NOT_ON_NODE, DRIVER_UNKNOWN, CDI_ONLY)

EXPLAINED = {
    SLICE_MISSING: "no ResourceSlice of this node publishes it (yet)",
    SLICES_UNAVAILABLE: "this node's ResourceSlices are not mirrored (the watch has not listed them, or they "
                        "were dropped after a long API outage)",
    NO_UUID: "its ResourceSlice publishes no uuid attribute for it",
    NOT_ON_NODE: "its uuid names no GPU or MIG device that NVML shows on this node",
    DRIVER_UNKNOWN: "it is a GPU of this node, but its driver is not in --kubernetes-dra-driver-names",
    CDI_ONLY: "the kubelet (1.27-1.30) names it only by CDI device names, and none carries a GPU UUID",
}

_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}")


@dataclass(frozen=True)
class DraResolution:
    """A claimed device resolved to ``key`` (with a MIG device's profile and UUID), or ``reason``."""

    key: GpuKey | None = None
    reason: str = ""
    mig_profile: str = ""
    mig_device_uuid: str = ""


@dataclass(frozen=True)
class DraContext:
    """What resolving needs besides the claim: the GPU drivers and the slices mirrored now."""

    drivers: frozenset[str]
    slices: SliceView


def _from_uuids(texts: Iterable[str], catalog: DeviceCatalog) -> DraResolution | None:
    """The first ``GPU-<uuid>`` / ``MIG-<uuid>`` in ``texts`` that names a device of this node."""
    for text in texts:
        for found in _UUID.findall(text):
            key = catalog.resolve(parse_device_id(found))
            if key is not None:
                return DraResolution(key, mig_device_uuid=found if key.gpu_instance_id is not None else "")
    return None


def _gpu_cdi(name: str, drivers: frozenset[str]) -> bool:
    """Does a CDI name (``vendor/class=device``) look like a GPU's? Its class is ``gpu``
    (``nvidia.com/gpu=0``), its vendor has a ``gpu`` label (``k8s.gpu.nvidia.com/claim=...``), or it
    is a configured driver's domain."""
    vendor, _, kind = name.partition("=")[0].lower().partition("/")
    return kind == "gpu" or "gpu" in vendor.split(".") or any(vendor == d or vendor.endswith("." + d)
                                                              for d in drivers)


def resolve(claimed: ClaimedDevice, context: DraContext, catalog: DeviceCatalog) -> DraResolution | None:
    """The GPU or MIG instance ``claimed`` is, a ``DraResolution`` with the reason it is not known,
    or None when it is no GPU (another driver's device that names no GPU here)."""
    configured = claimed.driver in context.drivers
    if not claimed.device:  # a 1.27-1.30 kubelet: CDI names only
        found = _from_uuids(claimed.cdi_devices, catalog)
        if found is not None:
            return found
        if configured or any(_gpu_cdi(name, context.drivers) for name in claimed.cdi_devices):
            return DraResolution(reason=CDI_ONLY)
        return None
    published = context.slices.get(*claimed.triple)
    if published is None:
        found = _from_uuids(claimed.cdi_devices, catalog)  # e.g. nvidia.com/gpu=GPU-<uuid>
        if found is not None:
            return found if configured else DraResolution(reason=DRIVER_UNKNOWN)
        if not configured:
            return None
        return DraResolution(reason=SLICE_MISSING if context.slices.synced else SLICES_UNAVAILABLE)
    key = catalog.resolve(parse_device_id(published.uuid)) if published.uuid else None
    if key is None:
        if not configured:
            return None
        return DraResolution(reason=NOT_ON_NODE if published.uuid else NO_UUID)
    if not configured:
        return DraResolution(reason=DRIVER_UNKNOWN)
    if key.gpu_instance_id is None:
        return DraResolution(key)
    return DraResolution(key, mig_profile=published.profile, mig_device_uuid=published.uuid)
