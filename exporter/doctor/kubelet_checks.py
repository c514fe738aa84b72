"""The kubelet's PodResources socket: present and permitted, ``List`` answers, what it hands out.

The ``List`` goes through the exporter's own client (``PodResourcesClient.poll_once``: same channel
options, deadline and error descriptions), accepting every resource name so the doctor sees what
the exporter would filter out. Each GPU device ID is then parsed and resolved against this node's
GPUs and MIG devices exactly as the attribution does (``exporter.kube.deviceids``): an ID that names
no GPU here is the "GPU order mismatch" that leaves a pod's GPU unlabelled or labels the wrong one.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from exporter.config import Config
from exporter.doctor.deadline import run_with_deadline
from exporter.doctor.nvml_checks import NvmlFindings
from exporter.doctor.report import Row, degraded, failed, ok, skipped
from exporter.kube.deviceids import DeviceCatalog, DeviceIdKind, ParsedDeviceId, parse_device_id
from exporter.kube.podresources.client import KubeletState, PodResourcesClient
from exporter.kube.podresources.listing import PodResourcesListing, gpu_resource_filter

SECTION = "kubelet"
OFF = "Kubernetes attribution is off (-k / DCGM_EXPORTER_KUBERNETES): no pod, namespace or container labels"

MOUNT_HINT = ("mount the kubelet's pod-resources directory into the exporter (hostPath /var/lib/kubelet/pod-resources, "
              "the directory, not the socket file) or point --pod-resources-kubelet-socket at it (a kubelet with "
              "another --root-dir moves it)")
PERMISSION_HINT = ("the socket is root-only: run the exporter as UID 0 (the chart does when kubernetes.enabled); on "
                   "SELinux hosts the container also needs a policy that allows connecting to it")
LIST_HINTS: dict[str, str] = {
    "UNIMPLEMENTED": "this socket does not serve v1.PodResourcesLister: use <kubelet root>/pod-resources/kubelet.sock "
                     "(not device-plugins/kubelet.sock) on a kubelet 1.20 or newer",
    "RESOURCE_EXHAUSTED": "the kubelet's node-wide PodResources rate limit (100 QPS, burst 10) is used up: find the "
                          "agent that calls it in a loop; the exporter backs off and calls once per interval",
    "TOO_LARGE": "the List answer exceeds the receive limit; report it with this output",
    "DEADLINE_EXCEEDED": "the kubelet does not answer in time (overloaded node?); the exporter retries with backoff",
    "UNAVAILABLE": "nothing serves the socket (kubelet restarting?); if it persists, a socket file was mounted "
                   "instead of its directory and went stale after a kubelet restart: mount the directory",
}
DEFAULT_LIST_HINT = "the kubelet refuses List: check the kubelet's log on this node"
ID_MISMATCH_HINT = ("the kubelet hands out GPUs this exporter cannot see or numbers them differently: give the "
                    "exporter container every GPU (NVIDIA_VISIBLE_DEVICES=all, no nvidia.com/gpu request), and for "
                    "nvidia<N> IDs (GKE) N must be the GPU's /dev/nvidia<N> minor number")
RESOURCE_HINT = "add the resource name with --nvidia-resource-names (NVIDIA_RESOURCE_NAMES) so its pods are attributed"


def check_kubelet(config: Config, gpus: NvmlFindings, timeout_s: float) -> list[Row]:
    """``gpus``: what the NVML checks found (this node's GPUs and MIG devices, the GPUs NVML cannot read)."""
    if not config.kubernetes:
        return [skipped(SECTION, "socket", OFF)]
    socket_row = _socket_row(config.pod_resources_socket)
    rows = [socket_row]
    if socket_row.verdict.is_problem:
        rows.append(skipped(SECTION, "list", "not called: the socket is not usable"))
        return rows
    client = PodResourcesClient(config.pod_resources_socket, config.pod_resources_interval_ms / 1000.0,
                                accept_resource=lambda _name: True, call_timeout_s=timeout_s)
    outcome = run_with_deadline(client.poll_once, timeout_s + 1.0, "doctor-kubelet")
    client.stop(timeout_s=1.0)
    state = client.state
    if not outcome.finished:
        rows.append(failed(SECTION, "list", f"List did not return within {timeout_s:g} s",
                           LIST_HINTS["DEADLINE_EXCEEDED"]))
        return rows
    if not state.up or state.listing is None:
        rows.append(_list_failed(state))
        return rows
    listing = state.listing
    holding = len(listing.pods)
    rows.append(ok(SECTION, "list", f"v1 List answers: {listing.pods_listed} pods, {holding} holding devices",
                   pods=listing.pods_listed, pods_with_devices=holding))
    rows.append(_resource_row(config.nvidia_resource_names, listing))
    rows.append(_device_id_row(config.nvidia_resource_names, listing, gpus))
    return rows


def _socket_row(path_text: str) -> Row:
    path = Path(path_text)
    try:
        info = path.stat()
    except FileNotFoundError:
        where = "its directory exists (is the kubelet running?)" if path.parent.is_dir() else \
            f"{path.parent} does not exist either"
        return failed(SECTION, "socket", f"no socket at {path}; {where}", MOUNT_HINT, path=str(path))
    except PermissionError as exc:
        return failed(SECTION, "socket", f"cannot look at {path}: {exc.strerror}", PERMISSION_HINT, path=str(path))
    if not stat.S_ISSOCK(info.st_mode):
        return failed(SECTION, "socket", f"{path} exists but is not a unix socket", MOUNT_HINT, path=str(path))
    if not os.access(path, os.R_OK | os.W_OK):
        return failed(SECTION, "socket", f"{path} is owned by UID {info.st_uid} mode {stat.filemode(info.st_mode)}; "
                      f"this process (UID {os.geteuid()}) may not connect", PERMISSION_HINT, path=str(path))
    return ok(SECTION, "socket", f"{path} present and permitted", path=str(path))


def _list_failed(state: KubeletState) -> Row:
    error = state.error or "no answer"
    if "permission denied" in error.lower():
        return failed(SECTION, "list", error, PERMISSION_HINT, error_kind=state.error_kind)
    hint = LIST_HINTS.get(state.error_kind, DEFAULT_LIST_HINT)
    if state.error_kind == "RESOURCE_EXHAUSTED":
        return degraded(SECTION, "list", error, hint, error_kind=state.error_kind)
    return failed(SECTION, "list", error, hint, error_kind=state.error_kind)


def _resource_row(resource_names: tuple[str, ...], listing: PodResourcesListing) -> Row:
    accept = gpu_resource_filter(resource_names)
    names = sorted({device.resource_name for pod in listing.pods for container in pod.containers
                    for device in container.devices})
    gpu = [name for name in names if accept(name)]
    ignored = [name for name in names if not accept(name)]
    suspicious = [name for name in ignored if name.startswith("nvidia.com/") or "gpu" in name.lower()]
    text = f"GPU resources: {', '.join(gpu) or 'none held right now'}"
    if ignored:
        text += f"; other resources (not attributed): {', '.join(ignored)}"
    if suspicious:
        return degraded(SECTION, "resources", text, f"{', '.join(suspicious)} look like GPUs: {RESOURCE_HINT}",
                        gpu=gpu, ignored=ignored)
    return ok(SECTION, "resources", text, gpu=gpu, ignored=ignored)


def _gpu_holders(resource_names: tuple[str, ...], listing: PodResourcesListing) -> dict[str, str]:
    """Each GPU device ID the kubelet handed out, and the first container (``ns/pod/container``) holding it."""
    accept = gpu_resource_filter(resource_names)
    holders: dict[str, str] = {}
    for pod in listing.pods:
        for container in pod.containers:
            for device in container.devices:
                if accept(device.resource_name):
                    holders.setdefault(device.device_id, f"{pod.namespace}/{pod.name}/{container.name}")
    return holders


def _device_id_row(resource_names: tuple[str, ...], listing: PodResourcesListing, gpus: NvmlFindings) -> Row:
    devices = gpus.devices
    holders = _gpu_holders(resource_names, listing)
    if not holders:
        return ok(SECTION, "device ids", "no GPU device ID handed out right now", forms={}, unmatched=[])
    parsed = {raw: parse_device_id(raw) for raw in holders}
    forms = Counter(item.kind.value for item in parsed.values())
    forms_text = ", ".join(f"{kind} x{count}" for kind, count in sorted(forms.items()))
    if not gpus.nvml_up or not devices:
        return skipped(SECTION, "device ids", f"{len(holders)} IDs ({forms_text}); not mapped: NVML shows no GPU",
                       forms=dict(forms))
    catalog = DeviceCatalog(devices, gpus.migs)
    unmatched = sorted(raw for raw, item in parsed.items() if catalog.resolve(item) is None)
    if not unmatched:
        return ok(SECTION, "device ids", f"{len(holders)} IDs ({forms_text}), every one maps to a GPU of this node",
                  forms=dict(forms), unmatched=[])
    return _unmatched_row(unmatched, holders, parsed, (forms, forms_text), gpus)


def _unmatched_row(unmatched: list[str], holders: Mapping[str, str], parsed: Mapping[str, ParsedDeviceId],
                   described: tuple[Counter[str], str], gpus: NvmlFindings) -> Row:
    """Device IDs that name no GPU here: opaque IDs, IDs of GPUs NVML cannot read, or a real mismatch.
    ``described``: the count of IDs of each form, and that count as the row writes it."""
    devices, unreadable = gpus.devices, gpus.unreadable
    forms, forms_text = described
    shown = "; ".join(f"{raw} ({holders[raw]})" for raw in unmatched[:5]) + (" ..." if len(unmatched) > 5 else "")
    opaque = all(parsed[raw].kind is DeviceIdKind.OPAQUE for raw in unmatched)
    minors = ", ".join(f"nvidia{device.minor}" for device in sorted(devices, key=lambda d: d.minor))
    text = (f"{len(unmatched)} of {len(holders)} IDs ({forms_text}) name no GPU of this node: {shown}; "
            f"this node's GPUs: {len(devices)} ({minors})")
    if opaque:
        return degraded(SECTION, "device ids", text, "IDs such as 'tegra' or 'all' name no single GPU; pods "
                        "holding them cannot be attributed", forms=dict(forms), unmatched=unmatched)
    if unreadable and len(unmatched) <= len(unreadable):
        lost = ", ".join(f"GPU {index}" for index in unreadable)
        return degraded(SECTION, "device ids", f"{text}; NVML cannot read {lost}, which these IDs may name",
                        f"fix {lost} first (see its identity row); its pods get their labels back when it answers",
                        forms=dict(forms), unmatched=unmatched)
    return failed(SECTION, "device ids", text, ID_MISMATCH_HINT, forms=dict(forms), unmatched=unmatched)
