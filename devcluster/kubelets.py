"""Real kubelet nodes for a ``scripts/cluster`` cluster (issue 40): ``scripts/cluster up --kubelets N``.

Each node is three processes of this user, beside the control plane:

* ``cri-<i>``: ``gpu-node cri`` (tools/platform/gpu-node), Kubernetes' fake CRI runtime
  (``k8s.io/cri-client/pkg/fake``) on ``<root>/cri.sock``. Nothing runs in a container; one whose
  command or args say ``exit-after=<duration>`` (and ``exit-code=<n>``) is reported exited that long
  after it started, so pods finish as they declare.
* ``kubelet-<i>``: the kubelet built from k8s.io/kubernetes at the control plane's pin, with its own
  ``--root-dir`` (``<state>/k<i>``), registered with the API server as ``system:node:<name>``
  (a client certificate from the cluster's CA; the API server's Node authorizer applies) and
  scheduled to by the real scheduler. Its device-plugin registration socket is
  ``/var/lib/kubelet/device-plugins/kubelet.sock`` whatever ``--root-dir`` says (the path is a
  constant of the device manager), so each kubelet runs in a mount namespace of its own
  (``unshare -m``) with ``<root>/device-plugins`` bind-mounted there: several kubelets with device
  plugins share one machine, and a device plugin outside the namespace reaches its kubelet through
  the host path of the same directory (a unix socket is its inode, not its name).
* ``deviceplugin-<i>``: ``gpu-node deviceplugin``, advertising the node's devices (``DEVICE_MODES``:
  whole GPUs by UUID, the NVIDIA device plugin's time-slicing replicas ``<uuid>::<n>``, MIG devices
  as ``nvidia.com/mig-<profile>``, GKE's ``nvidia<minor>``, or NVIDIA's mixed strategy: whole GPUs
  beside MIG devices); the kubelet calls its Allocate when it
  admits a pod, and PodResources reports what the kubelet's device manager assigned.

Every node carries the taint ``gpu-pod-exporter.dev/real-kubelet=true:NoSchedule`` from its
registration, so the DaemonSets and pods of the rest of the platform tier stay on kwok's nodes; a
pod meant for a real kubelet tolerates it (``toleration()``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devcluster import build, pki
from devcluster.api import Api, ApiError
from devcluster.control_plane import Cluster, ClusterError, _kubeconfig, _Processes, _running, _stop, free_port

TAINT_KEY = "gpu-pod-exporter.dev/real-kubelet"
NODE_PREFIX = "kubelet-"
#: The device manager's constant registration directory (k8s.io/kubelet deviceplugin/v1beta1).
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEVICE_MODES = ("whole", "time-slicing", "mig", "gke", "mixed")
#: Time-slicing replicas per GPU (the NVIDIA device plugin's ``sharing.timeSlicing.resources[].replicas``).
REPLICAS = 4
#: The MIG profile the ``mig`` mode advertises, two instances per GPU (NVIDIA's ``mixed`` strategy
#: names the resource after the profile).
MIG_PROFILE = "1g.10gb"
MIG_PER_GPU = 2


@dataclass(frozen=True)
class Gpu:
    """A simulated GPU the device plugin advertises: its UUID and its device minor number."""

    uuid: str
    minor: int


@dataclass(frozen=True)
class KubeletNode:
    """One real kubelet node: its name and the paths a test reads."""

    index: int
    name: str
    root_dir: str
    port: int
    healthz_port: int
    mode: str

    @property
    def pod_resources_socket(self) -> Path:
        return Path(self.root_dir) / "pod-resources" / "kubelet.sock"

    @property
    def device_plugins(self) -> Path:
        return Path(self.root_dir) / "device-plugins"


def toleration() -> dict[str, str]:
    """What a pod for a real kubelet node carries (the nodes' registration taint)."""
    return {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def mig_uuid(gpu: Gpu, instance: int) -> str:
    """A stable MIG device UUID for instance ``instance`` of ``gpu`` (NVML's ``MIG-<uuid>`` shape)."""
    hexdigits = gpu.uuid.removeprefix("GPU-").replace("-", "")
    body = f"{hexdigits[:-2]}{instance:02x}"
    return f"MIG-{body[:8]}-{body[8:12]}-{body[12:16]}-{body[16:20]}-{body[20:32]}"


def device_resources(mode: str, gpus: Sequence[Gpu]) -> dict[str, list[str]]:
    """Extended resource name -> device IDs, as the device plugin a provider runs would advertise."""
    if mode == "whole":
        return {"nvidia.com/gpu": [g.uuid for g in gpus]}
    if mode == "time-slicing":
        return {"nvidia.com/gpu": [f"{g.uuid}::{n}" for g in gpus for n in range(REPLICAS)]}
    if mode == "mig":
        return {f"nvidia.com/mig-{MIG_PROFILE}": [mig_uuid(g, i) for g in gpus for i in range(MIG_PER_GPU)]}
    if mode == "gke":
        return {"nvidia.com/gpu": [f"nvidia{g.minor}" for g in gpus]}
    if mode == "mixed":  # NVIDIA's mixed MIG strategy: the last two GPUs in MIG mode, the rest whole
        split = max(len(gpus) - 2, 0)
        return device_resources("whole", gpus[:split]) | device_resources("mig", gpus[split:])
    raise ClusterError(f"device mode {mode!r}: one of {', '.join(DEVICE_MODES)}")


def default_gpus() -> list[Gpu]:
    """The GPUs of the simulator's default scenario (what ``--simulate`` without a file serves)."""
    from simulator.scenario import load_scenario  # noqa: PLC0415 (only `up --kubelets` needs the simulator)

    return [Gpu(g.uuid, g.minor) for g in load_scenario("default").gpus]


def kubelet_configuration(node: KubeletNode, cri_endpoint: str, ca_file: Path) -> dict[str, Any]:
    """The KubeletConfiguration of one node (JSON is YAML). Each setting this machine or this test
    cluster needs, and why:"""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # This machine mounts cgroup v1 controllers (hybrid); kubelets of 1.35+ refuse v1 unless told.
        "failCgroupV1": False,
        # No per-QoS cgroup hierarchy and no node-allocatable enforcement: the fake runtime runs no
        # process to put in a cgroup, and several kubelets on one host would fight over the same
        # /kubepods tree.
        "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
        # cgroupfs: no systemd here to delegate cgroups to.
        "cgroupDriver": "cgroupfs",
        # The host may have swap; the kubelet refuses to start with swap on unless told.
        "failSwapOn": False,
        # Eviction and image GC off: the shared disk and memory of a CI machine are not this node's
        # to judge, and an eviction would end test pods for reasons unrelated to the test.
        "evictionHard": {"memory.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%",
                         "imagefs.available": "0%"},
        "imageGCHighThresholdPercent": 100,
        "localStorageCapacityIsolation": False,
        "containerRuntimeEndpoint": cri_endpoint,
        # Loopback ports of its own (several kubelets on one machine); no read-only port.
        "address": "127.0.0.1", "port": node.port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": node.healthz_port,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "AlwaysAllow"},
        # Pod logs under its root dir (/var/log/pods may not exist, and is shared).
        "podLogsDir": str(Path(node.root_dir) / "pod-logs"),
        # The rest of the platform tier's pods and DaemonSets stay on kwok's nodes.
        "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        # No DNS configuration for pods from the host's resolv.conf: nothing resolves names here.
        "resolvConf": "",
        "serializeImagePulls": False,
    }


def _state_file(state_dir: Path) -> Path:
    return state_dir / "kubelets.json"


def load(state_dir: Path) -> list[KubeletNode]:
    """The real kubelet nodes ``start`` added to the cluster in ``state_dir`` (none: empty)."""
    path = _state_file(state_dir)
    if not path.exists():
        return []
    return [KubeletNode(**n) for n in json.loads(path.read_text(encoding="utf-8"))]


def missing_prerequisites() -> str:
    """What this machine lacks to run real kubelet nodes, in words ("" when nothing)."""
    if os.geteuid() != 0:
        return "root (the kubelet manages cgroups and mounts; each runs in its own mount namespace)"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare(1) and mount(8) (util-linux)"
    return ""


def start(cluster: Cluster, count: int, *, modes: Sequence[str] = ("whole",), gpus: Sequence[Gpu] | None = None,
          dra: bool = False, log: Callable[[str], None] = print, deadline_s: float = 180.0) -> list[KubeletNode]:
    """Add ``count`` real kubelet nodes to ``cluster``; node i advertises ``modes[i % len(modes)]``
    through its device plugin and, with ``dra``, the same GPUs through a DRA driver (``gpu.nvidia.com``,
    one ResourceSlice per node, pool named after the node; ``start_dra_driver``).

    Returns once every node is Ready in the API server and its device plugin's resource shows in
    the node's allocatable."""
    missing = missing_prerequisites()
    if missing:
        raise ClusterError(f"real kubelet nodes need {missing}")
    for mode in modes:
        device_resources(mode, [])  # ClusterError for an unknown mode, before anything starts
    gpu_list = list(gpus) if gpus is not None else default_gpus()
    bins = {name: build.build(name) for name in ("kubelet", "gpu-node")}
    state_dir = cluster.state_dir
    ca = pki.Authority.load(state_dir / "pki")
    procs = _Processes(state_dir)
    DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)  # the bind mount's target must exist
    existing = load(state_dir)
    nodes = list(existing)
    admin = cluster.admin()
    added: list[KubeletNode] = []
    for offset in range(count):
        index = len(existing) + offset
        node = KubeletNode(index=index, name=f"{NODE_PREFIX}{index}", root_dir=str(state_dir / f"k{index}"),
                           port=free_port(), healthz_port=free_port(), mode=modes[offset % len(modes)])
        root = Path(node.root_dir)
        shutil.rmtree(root, ignore_errors=True)
        node.device_plugins.mkdir(parents=True)
        cert = ca.issue(f"kubelet-{index}", f"system:node:{node.name}", organizations=("system:nodes",))
        kubeconfig = _kubeconfig(root / "kubeconfig", cluster.server, cluster.ca_file,
                                 {"client-certificate": str(cert.cert), "client-key": str(cert.key)})
        cri = f"unix://{root / 'cri.sock'}"
        config = root / "config.yaml"
        config.write_text(json.dumps(kubelet_configuration(node, cri, cluster.ca_file), indent=2) + "\n",
                          encoding="utf-8")
        procs.start(f"cri-{index}", [str(bins["gpu-node"]), "cri", "--endpoint", cri])
        procs.wait_for(f"cri-{index}", "CRI socket", (root / "cri.sock").exists, deadline_s)
        kubelet_argv = [
            str(bins["kubelet"]), "--config", str(config), "--kubeconfig", str(kubeconfig),
            "--root-dir", str(root), "--hostname-override", node.name, "--node-ip", "127.0.0.1",
            "--cert-dir", str(root / "pki"), "--v=2"]
        # A mount namespace of its own, with its root dir's device-plugins directory where the
        # device manager insists on it; `exec` keeps one pid from unshare to the kubelet.
        procs.start(f"kubelet-{index}", [
            "unshare", "-m", "--propagation", "private", "--", "sh", "-c",
            f'mount --bind "$0" {DEVICE_PLUGIN_DIR} && exec "$@"', str(node.device_plugins), *kubelet_argv],
            exe=kubelet_argv[0])
        added.append(node)
        nodes.append(node)
        _state_file(state_dir).write_text(json.dumps([asdict(n) for n in nodes], indent=2) + "\n", encoding="utf-8")
        procs.wait_for(f"kubelet-{index}", "the device-plugin registration socket",
                       (node.device_plugins / "kubelet.sock").exists, deadline_s)
        start_device_plugin(cluster, node, device_resources(node.mode, gpu_list), procs)
        if dra:
            start_dra_driver(cluster, node, gpu_list, procs)
    for node in added:
        resources = device_resources(node.mode, gpu_list)
        procs.wait_for(f"kubelet-{node.index}", f"node {node.name} Ready with {', '.join(resources)}",
                       functools.partial(_node_ready_with, admin, node.name, resources), deadline_s)
        log(f"kubelet {node.name} ready ({node.mode}: {sum(len(v) for v in resources.values())} devices), "
            f"PodResources at {node.pod_resources_socket}")
    return added


def _node_ready_with(admin: Api, name: str, resources: dict[str, list[str]]) -> bool:
    """Whether the node is Ready and allocates exactly the devices its plugin advertises."""
    status = admin.get(f"/api/v1/nodes/{name}").get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    allocatable = status.get("allocatable") or {}
    return ready and all(allocatable.get(name) == str(len(ids)) for name, ids in resources.items())


def start_device_plugin(cluster: Cluster, node: KubeletNode, resources: dict[str, list[str]],
                        procs: _Processes | None = None) -> None:
    """(Re)start the node's device plugin advertising ``resources`` (name -> device IDs)."""
    procs = procs or _Processes(cluster.state_dir)
    name = f"deviceplugin-{node.index}"
    pidfile = procs.pids / f"{name}.pid"
    if pidfile.exists():
        _stop(pidfile, grace_s=10.0)
        pidfile.unlink()
    argv = [str(build.build("gpu-node")), "deviceplugin", "--dir", str(node.device_plugins)]
    for resource, ids in resources.items():
        argv += ["--resource", f"{resource}={','.join(ids)}"]
    procs.start(name, argv)


DRA_DRIVER = "gpu.nvidia.com"


def start_dra_driver(cluster: Cluster, node: KubeletNode, gpus: Sequence[Gpu], procs: _Processes | None = None) -> None:
    """Start the node's DRA driver (``gpu-node dra``): registers through the kubelet's plugin registry
    (``<root>/plugins_registry``, which follows ``--root-dir``) and publishes ``gpu-<index>`` devices
    with NVIDIA's attributes (``uuid``, ``type``, ``index``). It publishes with the admin's credentials:
    a real driver has a ServiceAccount of its own, which is no part of what the tests compare."""
    procs = procs or _Processes(cluster.state_dir)
    root = Path(node.root_dir)
    (root / "plugins_registry").mkdir(parents=True, exist_ok=True)
    argv = [str(build.build("gpu-node")), "dra", "--driver", DRA_DRIVER, "--node", node.name,
            "--kubeconfig", str(cluster.kubeconfig), "--registry", str(root / "plugins_registry"),
            "--data", str(root / "plugins" / DRA_DRIVER)]
    for index, gpu in enumerate(gpus):
        argv += ["--gpu", f"{index}:{gpu.uuid}"]
    procs.start(f"dra-{node.index}", argv)


def restart_kubelet(cluster: Cluster, node: KubeletNode, deadline_s: float = 180.0) -> None:
    """Stop the node's kubelet and start it again with the same arguments: its PodResources socket
    goes and comes back, it restores its device checkpoint, and the device plugin registers again."""
    procs = _Processes(cluster.state_dir)
    name = f"kubelet-{node.index}"
    argv = json.loads((procs.pids / f"{name}.argv.json").read_text(encoding="utf-8"))
    _, exe = (procs.pids / f"{name}.pid").read_text(encoding="utf-8").split("\n", 1)
    registration = node.device_plugins / "kubelet.sock"
    before = _identity(registration)
    _stop(procs.pids / f"{name}.pid", grace_s=20.0)
    procs.start(name, argv, exe=exe.strip())
    # The new kubelet empties the directory and creates its registration socket anew.
    procs.wait_for(name, "a new device-plugin registration socket",
                   lambda: _identity(registration) not in (None, before), deadline_s)


def _identity(path: Path) -> tuple[int, int, int] | None:
    """A file's identity (device, inode, change time): inode numbers alone are reused."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def stop_all(state_dir: Path, grace_s: float = 20.0) -> list[str]:
    """Stop every real kubelet node's processes (kubelets first, then device plugins, then CRIs)."""
    pids = state_dir / "pids"
    stopped: list[str] = []
    for prefix in ("kubelet-", "deviceplugin-", "dra-", "cri-"):
        for path in sorted(pids.glob(f"{prefix}*.pid")) if pids.is_dir() else []:
            name = path.name.removesuffix(".pid")
            if _running(path) and _stop(path, grace_s):
                stopped.append(name)
            path.unlink()
            (pids / f"{name}.argv.json").unlink(missing_ok=True)
    _state_file(state_dir).unlink(missing_ok=True)
    return stopped


def remove(cluster: Cluster) -> list[str]:
    """Stop the real kubelet nodes and delete their Node objects and the pods bound to them (with
    no kubelet left to confirm a deletion, grace period 0), so the cluster is as ``up`` made it."""
    nodes = load(cluster.state_dir)
    stopped = stop_all(cluster.state_dir)
    admin = cluster.admin()
    for node in nodes:
        pods = admin.get(f"/api/v1/pods?fieldSelector=spec.nodeName={node.name}")["items"]
        for pod in pods:
            meta = pod["metadata"]
            with contextlib.suppress(ApiError):
                admin.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                              {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        with contextlib.suppress(ApiError):
            admin.request("DELETE", "/apis/resource.k8s.io/v1/resourceslices"
                                    f"?fieldSelector=spec.nodeName={node.name}")
        with contextlib.suppress(ApiError):
            admin.request("DELETE", f"/api/v1/nodes/{node.name}")
    return stopped
