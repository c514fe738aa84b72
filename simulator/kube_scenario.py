"""The ``kubernetes:`` section of a simulator scenario, and the simulated cluster it describes.

The scenario loader stores the section as it found it; this module validates it (every mistake
is one ``ConfigError`` naming ``file:line`` and the key path, e.g.
``demo.yaml:14: kubernetes.pods[1].containers[0].gpus[0].mig: ...``) and turns it into a running
fake kubelet, fake API server and fake ``/proc``, so that ``gpu-pod-exporter --simulate`` shows
pod, namespace, container and team labels out of the box.

Schema (every key but ``pods[].name`` and ``containers[].name`` is optional)::

    kubernetes:
      node: sim-node                  # the node the pods run on (NODE_NAME); default sim-node
      gpu_id_type: uid                # how the fake kubelet names GPUs: uid (GPU-<uuid>, MIG-<uuid>)
                                      #   or device-name (GKE: nvidia<minor>[/gi<id>][/vgpu<n>])
      runtime: containerd             # containerd | cri-o | docker: container-ID scheme and cgroup names
      cgroup_driver: systemd          # systemd | cgroupfs
      cgroup_version: 2               # 1 | 2
      process_attribution: false      # true: run with --kubernetes-process-attribution (per-container
                                      #   memory and utilization from the PIDs below); default false, as
                                      #   a real install; a flag, env or config-file setting still wins
      host_pids: [31337]              # GPU processes outside any pod (show up as unattributed memory)
      namespaces:
        - name: ml-training
          labels: {team: research}
      pods:
        - name: trainer-0
          namespace: ml-training      # default: default; namespaces not listed are created bare
          uid: 9d8c...                # default: derived from namespace and name (stable across runs)
          labels: {app: trainer}
          qos: burstable              # guaranteed | burstable | besteffort (the pod's cgroup)
          containers:
            - name: trainer
              sidecar: false          # a restartable init container: the kubelet lists it first
              gpus:                   # GPUs by NVML index; a mapping for MIG instances and replicas
                - 0
                - {gpu: 1, replica: 2}          # time-slicing / MPS replica 2 of GPU 1
                - {gpu: 2, mig: 3}              # MIG GPU instance 3 of GPU 2
                - {gpu: 3, resource: nvidia.com/a100}   # a renamed resource
              pids: [4242, 4243]      # host PIDs of this container's GPU processes
              claims: [train-gpu]     # DRA ResourceClaims (of the pod's namespace) it uses
      dra:                            # Dynamic Resource Allocation (turns --kubernetes-enable-dra on)
        driver: gpu.nvidia.com        # the DRA driver publishing the GPUs (default gpu.nvidia.com)
        api_versions: [v1]            # resource.k8s.io versions the API server serves (v1, v1beta2, v1beta1)
        claims:
          - name: train-gpu
            namespace: ml-training
            devices: [2, {gpu: 4, mig: 1}]   # whole GPUs by NVML index, MIG GPU instances
        slices:                       # ResourceSlices of the node; default: one with every claimed GPU
          - {gpus: [2, 3]}            # a MIG-enabled GPU publishes its MIG devices
          - {gpus: [4], appears_after_s: 10}   # published only 10 s after start
      faults: {kubelet: missing, api_server: unreachable, forbidden: [namespaces], ...}
                                      # a broken node (simulator.kube_faults)

Resource names default to ``nvidia.com/gpu`` (whole GPU), ``nvidia.com/gpu.shared`` (replica)
and ``nvidia.com/mig-<profile>`` (MIG), as the NVIDIA device plugin advertises them. DRA devices
are named and published as NVIDIA's DRA driver does (``simulator.dra_devices``); a claim
used by several pods is one device shared by them.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tempfile
import threading
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from exporter import safeyaml
from exporter.config import ConfigError
from exporter.safeyaml import YamlValue
from exporter.snapshot import DeviceIdentity, MigIdentity
from simulator.dra_devices import DRIVER, PublishedDevice, gpu_device, mig_device
from simulator.fakeaccess import DRA_GRANTS
from simulator.fakeapiserver import SLICE_VERSIONS, FakeApiServer
from simulator.fakekubelet import FakeClaim, FakeClaimDevice, FakeContainer, FakeKubelet, FakePod
from simulator.fakewrites import stable_uid
from simulator.kube_faults import KubernetesFaults, apply_api_faults, apply_kubelet_faults, parse_faults
from simulator.scenario import MAX_SCENARIO_BYTES

SECTION = "kubernetes"
DEFAULT_NODE = "sim-node"
RUNTIMES = {"containerd": ("containerd://", "cri-containerd-"), "cri-o": ("cri-o://", "crio-"),
            "docker": ("docker://", "docker-")}
QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
MAX_SOCKET_PATH = 100  # unix socket paths must fit in sun_path (108 bytes, with the NUL)


@dataclass(frozen=True)
class GpuRef:
    """A GPU (by NVML index), optionally one MIG GPU instance of it and/or one replica of it."""

    gpu: int
    mig: int | None = None
    replica: int | None = None
    resource: str | None = None
    # Where the entry was written ("file:line", key path), for errors found once the GPUs are known.
    where: str = field(default="", compare=False)
    key: str = field(default="", compare=False)


@dataclass(frozen=True)
class ScenarioContainer:
    name: str
    sidecar: bool = False
    gpus: tuple[GpuRef, ...] = ()
    pids: tuple[int, ...] = ()
    claims: tuple[str, ...] = ()  # DRA ResourceClaims of the pod's namespace


@dataclass(frozen=True)
class ScenarioPod:
    namespace: str
    name: str
    uid: str
    labels: tuple[tuple[str, str], ...] = ()
    qos: str = "burstable"
    containers: tuple[ScenarioContainer, ...] = ()


@dataclass(frozen=True)
class ScenarioNamespace:
    name: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ScenarioClaim:
    """A DRA ResourceClaim and the GPUs / MIG GPU instances allocated to it."""

    namespace: str
    name: str
    devices: tuple[GpuRef, ...] = ()


@dataclass(frozen=True)
class ScenarioSlice:
    """A ResourceSlice publishing these GPUs (their MIG devices when MIG is on), maybe only after a while."""

    gpus: tuple[GpuRef, ...]
    appears_after_s: float = 0.0


@dataclass(frozen=True)
class ScenarioDra:
    driver: str = DRIVER
    api_versions: tuple[str, ...] = ("v1",)
    claims: tuple[ScenarioClaim, ...] = ()
    slices: tuple[ScenarioSlice, ...] | None = None  # None: one slice with every claimed GPU


@dataclass(frozen=True)
class KubernetesScenario:
    """A validated ``kubernetes:`` section."""

    node: str = DEFAULT_NODE
    gpu_id_type: str = "uid"
    runtime: str = "containerd"
    cgroup_driver: str = "systemd"
    cgroup_version: int = 2
    process_attribution: bool = False
    host_pids: tuple[int, ...] = ()
    namespaces: tuple[ScenarioNamespace, ...] = ()
    pods: tuple[ScenarioPod, ...] = ()
    source: str = "<scenario>"
    faults: KubernetesFaults = field(default_factory=KubernetesFaults)
    dra: ScenarioDra | None = None


# ---------------------------------------------------------------------------------------------
# Validation: the shared YAML reader (exporter.safeyaml), whose nodes carry line numbers, plus the
# few checks of this section's own.


def _string(value: YamlValue, *, pattern: Callable[[str], bool] | None = None, expected: str = "a string") -> str:
    raw = value.scalar()
    if not isinstance(raw, str) or not raw or (pattern is not None and not pattern(raw)):
        raise value.error(f"expected {expected}, got {raw!r}")
    return raw


def _integer(value: YamlValue, minimum: int = 0) -> int:
    raw = value.scalar()
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise value.error(f"expected an integer >= {minimum}, got {raw!r}")
    return raw


def _choice(value: YamlValue, choices: Sequence[object]) -> Any:
    raw = value.scalar()
    if raw not in choices or isinstance(raw, bool):
        raise value.error(f"expected one of {', '.join(map(str, choices))}, got {raw!r}")
    return raw


def _labels(value: YamlValue) -> tuple[tuple[str, str], ...]:
    labels: dict[str, str] = {}
    for name, item in value.mapping().items():
        raw = item.scalar()
        if not name:
            raise value.error(f"label keys must be strings, got {name!r}")
        if not isinstance(raw, str):
            raise item.error(f"label values must be strings (quote it: \"{raw}\"), got {raw!r}")
        labels[name] = raw
    return tuple(sorted(labels.items()))


def _where(value: YamlValue) -> str:
    return f"{value.source}:{value.line}"


def _is_dns_label(text: str) -> bool:
    return len(text) <= 253 and all(part.isalnum() or part in "-." for part in text)


def _gpu_ref(value: YamlValue) -> GpuRef:
    if not value.is_mapping():
        return GpuRef(gpu=_integer(value), where=_where(value), key=value.path)
    fields = value.mapping(("gpu", "mig", "replica", "resource"))
    if "gpu" not in fields:
        raise value.error("missing: which GPU (NVML index)", path=f"{value.path}.gpu")
    return GpuRef(
        gpu=_integer(fields["gpu"]),
        mig=_integer(fields["mig"]) if "mig" in fields else None,
        replica=_integer(fields["replica"]) if "replica" in fields else None,
        resource=_string(fields["resource"], expected="an extended-resource name such as nvidia.com/gpu")
        if "resource" in fields else None,
        where=_where(value), key=value.path,
    )


def _container(value: YamlValue, seen_pids: dict[int, str], claims: Callable[[str], bool]) -> ScenarioContainer:
    fields = value.mapping(("name", "sidecar", "gpus", "pids", "claims"))
    if "name" not in fields:
        raise value.error("missing: every container needs a name", path=f"{value.path}.name")
    pids: list[int] = []
    for pid_value in fields["pids"].sequence() if "pids" in fields else []:
        pid = _integer(pid_value, minimum=1)
        if pid in seen_pids:
            raise pid_value.error(f"PID {pid} is already used by {seen_pids[pid]}")
        seen_pids[pid] = value.path
        pids.append(pid)
    claimed: list[str] = []
    for claim in fields["claims"].sequence() if "claims" in fields else []:
        name = _string(claim, pattern=_is_dns_label, expected="a claim name")
        if not claims(name):
            raise claim.error(f"no claim {name!r} in this pod's namespace under kubernetes.dra.claims")
        claimed.append(name)
    return ScenarioContainer(
        name=_string(fields["name"], pattern=_is_dns_label, expected="a container name"),
        sidecar=fields["sidecar"].boolean() if "sidecar" in fields else False,
        gpus=tuple(_gpu_ref(gpu) for gpu in (fields["gpus"].sequence() if "gpus" in fields else [])),
        pids=tuple(pids),
        claims=tuple(claimed),
    )


def _dra(value: YamlValue) -> ScenarioDra:
    """The ``dra:`` section: claims, the node's ResourceSlices (None when not given: one slice with every
    claimed GPU) and the API versions served. Read in this order, so the first mistake in the file wins."""
    fields = value.mapping(("driver", "api_versions", "claims", "slices"))
    claims: dict[tuple[str, str], ScenarioClaim] = {}
    for item in fields["claims"].sequence() if "claims" in fields else []:
        claim = _dra_claim(item, claims)
        claims[(claim.namespace, claim.name)] = claim
    slices = [_dra_slice(item) for item in (fields["slices"].sequence() if "slices" in fields else [])]
    versions = tuple(_choice(item, SLICE_VERSIONS) for item in fields["api_versions"].sequence()) \
        if "api_versions" in fields else ("v1",)
    return ScenarioDra(
        driver=_string(fields["driver"], pattern=_is_dns_label, expected="a DRA driver name such as gpu.nvidia.com")
        if "driver" in fields else DRIVER,
        api_versions=versions, claims=tuple(claims.values()), slices=tuple(slices) if "slices" in fields else None)


def _dra_claim(item: YamlValue, earlier: Container[tuple[str, str]]) -> ScenarioClaim:
    """One ``dra.claims[]`` entry; ``earlier``: the ``(namespace, name)`` of the claims before it, since a
    pod names its claims by name within its namespace and two of one name would make that ambiguous."""
    claim_fields = item.mapping(("name", "namespace", "devices"))
    if "name" not in claim_fields:
        raise item.error("missing: every claim needs a name", path=f"{item.path}.name")
    name = _string(claim_fields["name"], pattern=_is_dns_label, expected="a claim name")
    namespace = (_string(claim_fields["namespace"], pattern=_is_dns_label, expected="a namespace name")
                 if "namespace" in claim_fields else "default")
    if (namespace, name) in earlier:
        raise item.error(f"duplicate claim {namespace}/{name}", path=f"{item.path}.name")
    devices = _dra_devices(claim_fields["devices"].sequence() if "devices" in claim_fields else [])
    if not devices:
        raise item.error("a claim needs at least one device", path=f"{item.path}.devices")
    return ScenarioClaim(namespace, name, devices)


def _dra_devices(items: Sequence[YamlValue]) -> tuple[GpuRef, ...]:
    """A claim's devices: whole GPUs or MIG GPU instances, as a DRA driver allocates them; replicas and
    renamed resources belong to the device plugin, not to DRA."""
    devices = tuple(_gpu_ref(device) for device in items)
    for device in devices:
        if device.replica is not None or device.resource is not None:
            raise ConfigError(device.where, device.key, "a DRA device is a GPU or a MIG GPU instance: "
                              "replica and resource do not apply")
    return devices


def _dra_slice(item: YamlValue) -> ScenarioSlice:
    """One ``dra.slices[]`` entry: the GPUs it publishes and how long after start it appears (a slice
    published late is how a driver that starts after the exporter looks)."""
    slice_fields = item.mapping(("gpus", "appears_after_s"))
    gpus = tuple(GpuRef(gpu=_integer(gpu), where=_where(gpu), key=gpu.path)
                 for gpu in (slice_fields["gpus"].sequence() if "gpus" in slice_fields else []))
    delay = slice_fields["appears_after_s"].scalar() if "appears_after_s" in slice_fields else 0
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
        raise slice_fields["appears_after_s"].error(f"expected seconds >= 0, got {delay!r}")
    return ScenarioSlice(gpus, float(delay))


def _pod(value: YamlValue, seen_pids: dict[int, str],
         claims: frozenset[tuple[str, str]] = frozenset()) -> ScenarioPod:
    fields = value.mapping(("name", "namespace", "uid", "labels", "qos", "containers"))
    if "name" not in fields:
        raise value.error("missing: every pod needs a name", path=f"{value.path}.name")
    name = _string(fields["name"], pattern=_is_dns_label, expected="a pod name")
    namespace = (_string(fields["namespace"], pattern=_is_dns_label, expected="a namespace name")
                 if "namespace" in fields else "default")
    containers: list[ScenarioContainer] = []
    for item in fields["containers"].sequence() if "containers" in fields else []:
        container = _container(item, seen_pids, lambda claim: (namespace, claim) in claims)
        if any(existing.name == container.name for existing in containers):
            raise item.error(f"duplicate container {container.name!r}", path=f"{item.path}.name")
        containers.append(container)
    if not containers:
        raise value.error("a pod needs at least one container", path=f"{value.path}.containers")
    return ScenarioPod(
        namespace=namespace, name=name,
        uid=(_string(fields["uid"]) if "uid" in fields else stable_uid("pod", namespace, name)),
        labels=_labels(fields["labels"]) if "labels" in fields else (),
        qos=_choice(fields["qos"], QOS_CLASSES) if "qos" in fields else "burstable",
        containers=tuple(containers),
    )


def _section_file(source: str) -> safeyaml.YamlFile:
    return safeyaml.YamlFile(source, ConfigError.at, shows_values=True, document_key=SECTION)


def parse_kubernetes_section(section: object, source: str = "<scenario>") -> KubernetesScenario:
    """Validate a ``kubernetes:`` section: a ``yaml.Node`` (errors then carry line numbers) or
    the plain data a loader produced with ``yaml.safe_load`` (errors name the key path)."""
    node = section if isinstance(section, yaml.Node) else (
        yaml.SafeDumper(io.StringIO()).represent_data(section))
    top = _section_file(source).root(node, SECTION)
    if top.is_null():
        return KubernetesScenario(source=source)
    fields = top.mapping(("node", "gpu_id_type", "runtime", "cgroup_driver", "cgroup_version",
                          "process_attribution", "host_pids", "namespaces", "pods", "faults", "dra"))

    def get(name: str, parse: Callable[[YamlValue], Any], default: Any) -> Any:
        return parse(fields[name]) if name in fields else default

    seen_pids: dict[int, str] = {}
    host_pids: list[int] = []
    for pid_value in get("host_pids", YamlValue.sequence, []):
        pid = _integer(pid_value, minimum=1)
        if pid in seen_pids:
            raise pid_value.error(f"PID {pid} is listed twice")
        seen_pids[pid] = pid_value.path
        host_pids.append(pid)

    namespaces: dict[str, ScenarioNamespace] = {}
    for item in get("namespaces", YamlValue.sequence, []):
        ns_fields = item.mapping(("name", "labels"))
        if "name" not in ns_fields:
            raise item.error("missing: every namespace needs a name", path=f"{item.path}.name")
        name = _string(ns_fields["name"], pattern=_is_dns_label, expected="a namespace name")
        if name in namespaces:
            raise item.error(f"duplicate namespace {name!r}", path=f"{item.path}.name")
        labels = _labels(ns_fields["labels"]) if "labels" in ns_fields else ()
        namespaces[name] = ScenarioNamespace(name, labels)

    dra: ScenarioDra | None = get("dra", _dra, None)
    claim_names = frozenset((claim.namespace, claim.name) for claim in (dra.claims if dra else ()))
    pods: dict[tuple[str, str], ScenarioPod] = {}
    for item in get("pods", YamlValue.sequence, []):
        pod = _pod(item, seen_pids, claim_names)
        if (pod.namespace, pod.name) in pods:
            raise item.error(f"duplicate pod {pod.namespace}/{pod.name}", path=f"{item.path}.name")
        pods[(pod.namespace, pod.name)] = pod
        namespaces.setdefault(pod.namespace, ScenarioNamespace(pod.namespace))

    return KubernetesScenario(
        node=get("node", lambda v: _string(v, pattern=_is_dns_label, expected="a node name"), DEFAULT_NODE),
        gpu_id_type=get("gpu_id_type", lambda v: _choice(v, ("uid", "device-name")), "uid"),
        runtime=get("runtime", lambda v: _choice(v, tuple(RUNTIMES)), "containerd"),
        cgroup_driver=get("cgroup_driver", lambda v: _choice(v, ("systemd", "cgroupfs")), "systemd"),
        cgroup_version=get("cgroup_version", lambda v: _choice(v, (1, 2)), 2),
        process_attribution=get("process_attribution", YamlValue.boolean, False),
        host_pids=tuple(host_pids),
        namespaces=tuple(namespaces.values()),
        pods=tuple(pods.values()),
        source=source,
        faults=get("faults", lambda v: parse_faults(v, _string, _choice), KubernetesFaults()),
        dra=dra,
    )


def load_kubernetes_section(path: str | Path) -> KubernetesScenario | None:
    """Read a scenario file and validate its top-level ``kubernetes:`` key (None when absent)."""
    root = _section_file(str(path)).load("scenario", max_bytes=MAX_SCENARIO_BYTES, allow_aliases=True)
    if root is None or not root.is_mapping():
        return None
    for key_node, value_node in root.node.value:
        if key_node.value == SECTION:
            return parse_kubernetes_section(value_node, str(path))
    return None


# ---------------------------------------------------------------------------------------------
# The simulated cluster.


def container_id(pod_uid: str, container: str) -> str:
    """A stable 64-hex-digit container ID."""
    return hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()


def referenced(ref: GpuRef, devices: Sequence[DeviceIdentity],
               migs: Sequence[MigIdentity]) -> tuple[DeviceIdentity, MigIdentity | None]:
    """The GPU and MIG instance a reference names; ``ConfigError`` (at the reference's file:line)
    when the GPU or MIG instance does not exist in the simulated inventory."""
    by_index = {device.index: device for device in devices}
    device = by_index.get(ref.gpu)
    if device is None:
        known = ", ".join(str(index) for index in sorted(by_index)) or "none"
        raise ConfigError(ref.where, f"{ref.key}", f"GPU {ref.gpu} does not exist (simulated GPUs: {known})")
    mig: MigIdentity | None = None
    if ref.mig is not None:
        instances = [m for m in migs if m.parent_uuid == device.uuid]
        mig = next((m for m in instances if m.gpu_instance_id == ref.mig), None)
        if mig is None:
            known = ", ".join(str(m.gpu_instance_id) for m in instances) or "none: MIG is not enabled there"
            raise ConfigError(ref.where, f"{ref.key}.mig",
                              f"GPU {ref.gpu} has no MIG GPU instance {ref.mig} (instances: {known})")
    return device, mig


def device_id(ref: GpuRef, devices: Sequence[DeviceIdentity], migs: Sequence[MigIdentity],
              id_type: str) -> tuple[str, str]:
    """``(resource name, device ID)`` the fake kubelet reports for a GPU reference (``ConfigError``
    when it names no simulated GPU or MIG instance)."""
    device, mig = referenced(ref, devices, migs)
    if id_type == "device-name":
        text = f"nvidia{device.minor}"
        if mig is not None:
            text += f"/gi{mig.gpu_instance_id}"
        if ref.replica is not None:
            text += f"/vgpu{ref.replica}"
    else:
        text = mig.uuid if mig is not None else device.uuid
        if ref.replica is not None:
            text += f"::{ref.replica}"
    if ref.resource:
        resource = ref.resource
    elif mig is not None:
        resource = "nvidia.com/mig-" + mig.profile.replace("+", ".")
    elif ref.replica is not None:
        resource = "nvidia.com/gpu.shared"
    else:
        resource = "nvidia.com/gpu"
    return resource, text


def _published(device: DeviceIdentity, mig: MigIdentity | None) -> PublishedDevice:
    if mig is None:
        return gpu_device(device.index, device.uuid, device.model)
    return mig_device(device.index, device.uuid, mig.uuid, mig.profile, mig.gpu_instance_id, product=device.model)


@dataclass(frozen=True)
class DraPlan:
    """What the fakes serve for a ``dra:`` section: the claims as the kubelet lists them, and the
    ResourceSlices ``(name, devices, appears_after_s)`` the API server publishes."""

    driver: str
    claims: Mapping[tuple[str, str], FakeClaim]
    slices: tuple[tuple[str, tuple[PublishedDevice, ...], float], ...]


def dra_plan(section: KubernetesScenario, devices: Sequence[DeviceIdentity],
             migs: Sequence[MigIdentity]) -> DraPlan | None:
    """Resolve the ``dra:`` section against the simulated GPUs (``ConfigError`` for a GPU or MIG
    instance that does not exist)."""
    dra = section.dra
    if dra is None:
        return None
    claims: dict[tuple[str, str], FakeClaim] = {}
    claimed_gpus: list[GpuRef] = []
    for claim in dra.claims:
        claimed: list[FakeClaimDevice] = []
        for ref in claim.devices:
            name, _ = _published(*referenced(ref, devices, migs))
            uid = stable_uid("resourceclaim", claim.namespace, claim.name)
            claimed.append(FakeClaimDevice(dra.driver, section.node, name,
                                           cdi_devices=(f"k8s.gpu.nvidia.com/claim={uid}-{name}",)))
            claimed_gpus.append(GpuRef(ref.gpu, where=ref.where, key=ref.key))
        claims[(claim.namespace, claim.name)] = FakeClaim(claim.namespace, claim.name, tuple(claimed))
    wanted = dra.slices if dra.slices is not None else (ScenarioSlice(tuple(claimed_gpus)),)
    slices: list[tuple[str, tuple[PublishedDevice, ...], float]] = []
    for number, item in enumerate(wanted):
        published: dict[str, PublishedDevice] = {}
        for ref in item.gpus:
            device, _ = referenced(ref, devices, migs)
            instances = sorted((m for m in migs if m.parent_uuid == device.uuid),
                               key=lambda m: (m.gpu_instance_id, m.compute_instance_id))
            if not instances:
                name, attributes = _published(device, None)
                published[name] = (name, attributes)
            for mig in instances:
                name, attributes = _published(device, mig)
                published.setdefault(name, (name, attributes))  # one device per GPU instance
        slices.append((f"{section.node}-{dra.driver}-{number}", tuple(published.values()), item.appears_after_s))
    return DraPlan(dra.driver, claims, tuple(slices))


def cgroup_path(scenario: KubernetesScenario, pod: ScenarioPod, cid: str) -> str:
    """The container's cgroup path for the scenario's driver and runtime."""
    prefix = RUNTIMES[scenario.runtime][1]
    if scenario.cgroup_driver == "cgroupfs":
        qos = "" if pod.qos == "guaranteed" else f"/{pod.qos}"
        leaf = f"crio-{cid}" if scenario.runtime == "cri-o" else cid
        return f"/kubepods{qos}/pod{pod.uid}/{leaf}"
    uid = pod.uid.replace("-", "_")
    if pod.qos == "guaranteed":
        return f"/kubepods.slice/kubepods-pod{uid}.slice/{prefix}{cid}.scope"
    return f"/kubepods.slice/kubepods-{pod.qos}.slice/kubepods-{pod.qos}-pod{uid}.slice/{prefix}{cid}.scope"


def _cgroup_file(scenario: KubernetesScenario, path: str) -> str:
    if scenario.cgroup_version == 2:
        return f"0::{path}\n"
    controllers = ("memory", "cpu,cpuacct", "devices", "pids")
    lines = [f"{12 - index}:{controller}:{path}" for index, controller in enumerate(controllers)]
    return "\n".join([*lines, f"1:name=systemd:{path}", "0::/"]) + "\n"


def _write_process(proc_root: Path, pid: int, cgroup: str) -> None:
    directory = proc_root / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup").write_text(cgroup, encoding="utf-8")
    # /proc/<pid>/stat: field 22 is the start time the attribution cache keys on.
    (directory / "stat").write_text(
        f"{pid} (python3) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {1000 + pid} 0 0\n",
        encoding="utf-8")


@dataclass
class SimulatedCluster:
    """A running fake kubelet, fake API server and fake ``/proc`` for one scenario."""

    scenario: KubernetesScenario
    kubelet: FakeKubelet
    apiserver: FakeApiServer
    socket_path: str
    kubeconfig_path: str
    proc_root: str
    _cleanup: list[Path] = field(default_factory=list)
    _timers: list[threading.Timer] = field(default_factory=list)

    @property
    def node_name(self) -> str:
        return self.scenario.node

    def config_overrides(self) -> dict[str, object]:
        """Config fields that point the exporter at this cluster (use with dataclasses.replace)."""
        return {"kubernetes": True, "pod_resources_socket": self.socket_path,
                "kubeconfig": self.kubeconfig_path, "proc_root": self.proc_root, "node_name": self.node_name,
                "kubernetes_gpu_id_type": self.scenario.gpu_id_type}

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self.kubelet.stop()
        self.apiserver.stop()
        for path in self._cleanup:
            shutil.rmtree(path, ignore_errors=True)


def start_simulated_cluster(section: KubernetesScenario, devices: Sequence[DeviceIdentity],
                            migs: Sequence[MigIdentity], workdir: str | Path) -> SimulatedCluster:
    """Start the fakes for ``section`` against the simulated GPUs; files go under ``workdir``.

    The kubelet socket lives in ``workdir/pod-resources/`` unless that path is too long for a
    unix socket, in which case a short temporary directory is used (and removed by ``stop``).
    """
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    cleanup: list[Path] = []
    socket_dir = root / "pod-resources"
    if len(str(socket_dir / "kubelet.sock")) > MAX_SOCKET_PATH:
        socket_dir = Path(tempfile.mkdtemp(prefix="gpe-kubelet-"))
        cleanup.append(socket_dir)
    socket_path = socket_dir / "kubelet.sock"

    scheme = RUNTIMES[section.runtime][0]
    proc_root = root / "proc"
    plan = dra_plan(section, devices, migs)
    fake_pods: list[FakePod] = []
    for pod in section.pods:
        containers = []
        for container in pod.containers:
            assigned = tuple(device_id(ref, devices, migs, section.gpu_id_type) for ref in container.gpus)
            claims = tuple(plan.claims[(pod.namespace, claim)] for claim in container.claims) if plan else ()
            containers.append(FakeContainer(container.name, assigned, sidecar=container.sidecar, claims=claims))
            cid = container_id(pod.uid, container.name)
            for pid in container.pids:
                _write_process(proc_root, pid, _cgroup_file(section, cgroup_path(section, pod, cid)))
        fake_pods.append(FakePod(pod.namespace, pod.name, tuple(containers)))
    for pid in section.host_pids:
        _write_process(proc_root, pid, _cgroup_file(section, "/system.slice/simulated-leftover.service"))
    proc_root.mkdir(parents=True, exist_ok=True)

    apiserver = FakeApiServer(section.node).start()
    kubelet = FakeKubelet(socket_path, fake_pods)
    apply_kubelet_faults(section.faults, kubelet)
    timers: list[threading.Timer] = []
    try:
        if plan is not None and section.dra is not None:
            apiserver.access.grant(DRA_GRANTS)  # the chart's ClusterRole with kubernetesDRA.enabled
            apiserver.resource_versions = section.dra.api_versions
            for name, published, delay in plan.slices:
                publish = partial(apiserver.add_resource_slice, name, plan.driver, section.node, published)
                if delay <= 0:
                    publish()
                    continue
                timer = threading.Timer(delay, publish)
                timer.daemon = True
                timer.start()
                timers.append(timer)
        for namespace in section.namespaces:
            apiserver.add_namespace(namespace.name, dict(namespace.labels))
        for pod in section.pods:
            def statuses(sidecars: bool, pod: ScenarioPod = pod) -> list[tuple[str, str]]:
                return [(c.name, scheme + container_id(pod.uid, c.name)) for c in pod.containers
                        if c.sidecar == sidecars]

            apiserver.add_pod(pod.namespace, pod.name, uid=pod.uid, labels=dict(pod.labels),
                              containers=statuses(False), init_containers=statuses(True))
        kubeconfig = apiserver.write_kubeconfig(root / "kubeconfig")
        apply_api_faults(section.faults, apiserver)
        if section.faults.kubelet_runs:
            kubelet.start()
        else:
            socket_dir.mkdir(parents=True, exist_ok=True)  # the directory is there, the kubelet's socket is not
    except BaseException:
        for timer in timers:
            timer.cancel()
        apiserver.stop()
        for path in cleanup:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return SimulatedCluster(scenario=section, kubelet=kubelet, apiserver=apiserver,
                            socket_path=str(socket_path), kubeconfig_path=str(kubeconfig),
                            proc_root=str(proc_root), _cleanup=cleanup, _timers=timers)


def default_kubernetes_section(devices: Sequence[DeviceIdentity],
                               migs: Sequence[MigIdentity]) -> KubernetesScenario:
    """A small cluster that exercises every attribution case on whatever GPUs are simulated.

    The first whole GPU belongs to a training pod (team research, from its namespace); the
    second is time-sliced between two inference pods (team serving, one set on the pod); the
    first MIG instance, if any, belongs to a notebook; remaining GPUs stay free. One host
    process (PID 31337) holds memory outside any pod.
    """
    mig_parents = {mig.parent_uuid for mig in migs}
    whole = [device for device in devices if device.uuid not in mig_parents]
    pods: list[ScenarioPod] = []

    def pod(namespace: str, name: str, container: str, refs: tuple[GpuRef, ...], *, pids: tuple[int, ...],
            labels: Mapping[str, str]) -> ScenarioPod:
        return ScenarioPod(namespace, name, stable_uid("pod", namespace, name), tuple(sorted(labels.items())),
                           "burstable", (ScenarioContainer(container, gpus=refs, pids=pids),))

    if whole:
        pods.append(pod("ml-training", "trainer-0", "trainer", (GpuRef(whole[0].index),), pids=(4242,),
                        labels={"app": "trainer"}))
    if len(whole) > 1:
        pods.append(pod("inference", "llm-server-0", "server", (GpuRef(whole[1].index, replica=0),),
                        pids=(5151,), labels={"app": "llm-server"}))
        pods.append(pod("inference", "embedder-0", "embedder", (GpuRef(whole[1].index, replica=1),),
                        pids=(5252,), labels={"app": "embedder", "team": "search"}))
    if migs:
        first = migs[0]
        parent = next((device for device in devices if device.uuid == first.parent_uuid), None)
        if parent is not None:
            pods.append(pod("research", "notebook-0", "jupyter",
                            (GpuRef(parent.index, mig=first.gpu_instance_id),), pids=(6363,),
                            labels={"app": "notebook"}))
    namespaces = (
        ScenarioNamespace("ml-training", (("team", "research"),)),
        ScenarioNamespace("inference", (("team", "serving"),)),
        ScenarioNamespace("research", (("team", "research"),)),
    )
    return KubernetesScenario(namespaces=namespaces, pods=tuple(pods), host_pids=(31337,), source="<default>")
