"""Device IDs as the kubelet reports them, and which GPU or MIG instance each one names.

Device plugins choose the IDs; the kubelet passes them through PodResources unchanged
(NVIDIA's k8s-device-plugin: ``internal/rm/devices.go``, ``internal/rm/device_map.go``). The forms
seen in practice:

* NVIDIA device plugin (any ``DEVICE_ID_STRATEGY``): ``GPU-<uuid>`` for a full GPU,
  ``MIG-<uuid>`` for a MIG device, ``MIG-GPU-<uuid>/<gi>/<ci>`` for MIG on old drivers, and a
  ``::<n>`` suffix for time-slicing or MPS replicas (``GPU-<uuid>::3``, ``MIG-<uuid>::7``).
* GKE device plugin: ``nvidia<N>``, ``nvidia<N>/vgpu<K>`` (time-sharing), ``nvidia<N>/gi<M>``
  and ``nvidia<N>/gi<M>/vgpu<K>`` (MIG); any of them may also carry a ``::<n>`` replica suffix
  (a device plugin that replicates GKE-style names the way NVIDIA's plugin replicates UUIDs).
  ``N`` is the GPU's ``/dev/nvidia<N>`` device-file minor number, not the NVML index: GKE's
  plugin discovers GPUs by listing ``/dev`` for ``^nvidia[0-9]*$`` and MIG partitions from
  ``/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<M>`` (GoogleCloudPlatform/
  container-engine-accelerators ``pkg/gpu/nvidia/manager.go``, ``mig/mig.go``). The two usually
  coincide, which is why dcgm-exporter's index-based matching mostly works. ``M`` is the NVML
  GPU-instance id.
* Anything else (``tegra``, ``all``, other vendors) is opaque and names no GPU we can see.

Parsing is pure text work; resolving needs the node's GPU and MIG identities, because a modern
``MIG-<uuid>`` does not contain its parent GPU. Both ID families are always recognised: they
cannot be confused with each other, and refusing one because ``--kubernetes-gpu-id-type`` names
the other only reproduces dcgm-exporter's "no pod labels on GKE" failure (its issues #342, #85).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from exporter.snapshot import DeviceIdentity, MigIdentity


class DeviceIdKind(enum.Enum):
    """Which naming scheme a device ID follows."""

    GPU_UUID = "gpu-uuid"  # GPU-<uuid>
    MIG_UUID = "mig-uuid"  # MIG-<uuid>
    MIG_LEGACY = "mig-legacy"  # MIG-GPU-<uuid>/<gi>/<ci>
    DEVICE_NAME = "device-name"  # nvidia<N>[/vgpu<K>]
    DEVICE_NAME_MIG = "device-name-mig"  # nvidia<N>/gi<M>[/vgpu<K>]
    OPAQUE = "opaque"  # tegra, all, anything else

    @property
    def id_type(self) -> str | None:
        """The ``--kubernetes-gpu-id-type`` value this form belongs to (None when opaque)."""
        if self in (DeviceIdKind.GPU_UUID, DeviceIdKind.MIG_UUID, DeviceIdKind.MIG_LEGACY):
            return "uid"
        if self in (DeviceIdKind.DEVICE_NAME, DeviceIdKind.DEVICE_NAME_MIG):
            return "device-name"
        return None


@dataclass(frozen=True)
class ParsedDeviceId:
    """What the text of one device ID says, before looking at this node's GPUs.

    ``uuid`` is the GPU UUID (``GPU_UUID``, and the parent for ``MIG_LEGACY``) or the MIG device
    UUID (``MIG_UUID``). ``device_number`` is GKE's ``N``. ``replica`` is the time-slicing / MPS
    replica (``::<n>``) or GKE's ``vgpu<K>``, kept as text because it becomes a label value.
    """

    raw: str
    kind: DeviceIdKind
    uuid: str = ""
    device_number: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    replica: str | None = None


@dataclass(frozen=True)
class GpuKey:
    """One attributable unit: a whole GPU (``gpu_instance_id`` None) or one MIG GPU instance."""

    uuid: str
    gpu_instance_id: int | None = None


_UUID_BODY = r"[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}"
_MIG_LEGACY = re.compile(rf"^MIG-(GPU-{_UUID_BODY})/(\d+)/(\d+)$")
_GPU_UUID = re.compile(rf"^GPU-{_UUID_BODY}$")
_MIG_UUID = re.compile(rf"^MIG-{_UUID_BODY}$")
_DEVICE_NAME = re.compile(r"^nvidia(\d+)(?:/gi(\d+))?(?:/vgpu(\d+))?$")
_REPLICA = re.compile(r"^\d+$")


def parse_device_id(raw: str) -> ParsedDeviceId:
    """Classify one kubelet device ID; never raises (unknown text is ``OPAQUE``)."""
    base, separator, replica_text = raw.partition("::")
    replica: str | None = None
    if separator:
        if not _REPLICA.match(replica_text):
            return ParsedDeviceId(raw=raw, kind=DeviceIdKind.OPAQUE)
        replica = replica_text
    if match := _MIG_LEGACY.match(base):
        return ParsedDeviceId(raw=raw, kind=DeviceIdKind.MIG_LEGACY, uuid=match.group(1),
                              gpu_instance_id=int(match.group(2)), compute_instance_id=int(match.group(3)),
                              replica=replica)
    if _MIG_UUID.match(base):
        return ParsedDeviceId(raw=raw, kind=DeviceIdKind.MIG_UUID, uuid=base, replica=replica)
    if _GPU_UUID.match(base):
        return ParsedDeviceId(raw=raw, kind=DeviceIdKind.GPU_UUID, uuid=base, replica=replica)
    if match := _DEVICE_NAME.match(base):
        number, instance, vgpu = match.groups()
        return ParsedDeviceId(
            raw=raw,
            kind=DeviceIdKind.DEVICE_NAME_MIG if instance is not None else DeviceIdKind.DEVICE_NAME,
            device_number=int(number),
            gpu_instance_id=int(instance) if instance is not None else None,
            replica=replica if replica is not None else vgpu,  # ``::<n>`` names the replica when both are given
        )
    return ParsedDeviceId(raw=raw, kind=DeviceIdKind.OPAQUE)


class DeviceCatalog:
    """This node's GPUs and MIG devices, indexed for resolving device IDs. Immutable.

    Built once per change of the GPU inventory (not per kubelet poll); lookups are dict hits.
    UUID comparisons ignore case because NVML prints lower-case hex but device plugins and
    users are not bound to it.
    """

    def __init__(self, devices: Iterable[DeviceIdentity], migs: Iterable[MigIdentity]) -> None:
        self._gpu_by_uuid: Mapping[str, str] = MappingProxyType(
            {device.uuid.lower(): device.uuid for device in devices})
        self._gpu_by_minor: Mapping[int, str] = MappingProxyType(
            {device.minor: device.uuid for device in devices})
        self._mig_by_uuid: Mapping[str, GpuKey] = MappingProxyType(
            {mig.uuid.lower(): GpuKey(mig.parent_uuid, mig.gpu_instance_id) for mig in migs})

    def resolve(self, parsed: ParsedDeviceId) -> GpuKey | None:
        """The GPU or MIG instance this ID names on this node, or None (opaque or not here)."""
        kind = parsed.kind
        if kind is DeviceIdKind.GPU_UUID:
            uuid = self._gpu_by_uuid.get(parsed.uuid.lower())
            return GpuKey(uuid) if uuid is not None else None
        if kind is DeviceIdKind.MIG_UUID:
            return self._mig_by_uuid.get(parsed.uuid.lower())
        if kind is DeviceIdKind.MIG_LEGACY:
            uuid = self._gpu_by_uuid.get(parsed.uuid.lower())
            return GpuKey(uuid, parsed.gpu_instance_id) if uuid is not None else None
        if kind in (DeviceIdKind.DEVICE_NAME, DeviceIdKind.DEVICE_NAME_MIG):
            assert parsed.device_number is not None  # set by parse_device_id for these kinds
            uuid = self._gpu_by_minor.get(parsed.device_number)
            return GpuKey(uuid, parsed.gpu_instance_id) if uuid is not None else None
        return None
