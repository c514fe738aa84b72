"""DRA devices as NVIDIA's DRA driver publishes them in ResourceSlices, for the fakes and scenarios.

The driver (``gpu.nvidia.com``) names a whole GPU ``gpu-<index>`` and a MIG device
``gpu-<index>-mig-<profile>-<gpu instance>`` and publishes, among others, the attributes attribution
reads: ``type`` (``gpu`` / ``mig``), ``uuid``, and for a MIG device ``parentUUID`` and ``profile``
(the driver's ResourceSlices, and dcgm-exporter's ``transformation/dra.go`` that reads them). Product name, index
and driver version are published too, as the real driver does, so a reader that depends on exactly
the four attributes it needs is tested against a realistic attribute set.
"""

from __future__ import annotations

from collections.abc import Mapping

DRIVER = "gpu.nvidia.com"
# A ``version`` attribute must be semver 2.0: the real API server rejects NVML's "570.124.06" (leading
# zero), so the driver's attribute is the semver form (tests/platform/test_attribution.py creates these).
DRIVER_VERSION = "570.124.6"

PublishedDevice = tuple[str, Mapping[str, str | int]]  # (device name, attributes)


def gpu_device(index: int, uuid: str, product: str = "NVIDIA H100 80GB HBM3") -> PublishedDevice:
    return f"gpu-{index}", {"type": "gpu", "uuid": uuid, "index": index, "minor": index, "productName": product,
                            "driverVersion": DRIVER_VERSION, "architecture": "Hopper"}


def mig_device(parent_index: int, parent_uuid: str, uuid: str, profile: str, gpu_instance_id: int, *,
               product: str = "NVIDIA H100 80GB HBM3") -> PublishedDevice:
    name = f"gpu-{parent_index}-mig-{profile.replace('.', '')}-{gpu_instance_id}"
    return name, {"type": "mig", "uuid": uuid, "parentUUID": parent_uuid, "parentIndex": parent_index,
                  "profile": profile, "productName": product, "driverVersion": DRIVER_VERSION}
