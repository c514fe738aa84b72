"""The one fake API server (simulator/fakeapiserver.py) as the remediator's tests use it.

The server serves the exporter's lists and watches and the remediator's writes alike (Nodes and their
patches, Events, evictions, named API groups: simulator/fakewrites.py). ``FakeNodeApiServer`` is that
server with the names these tests were written against: ``requests`` is every request with its
method, path, body and status (the server's ``calls``), and ``add_pod(namespace, name, node, ...)``
takes the node and the GPUs a pod asks for. Everything else (``add_node``, ``node``, ``writes``,
``fail_next``, ``block_evictions``, ``conflict_next_patches``, ``event_list``, ``objects_of``, ``pods``,
``nodes``...) is the server's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from simulator.fakeapiserver import FakeApiServer
from simulator.fakewrites import JsonObject, Request


class FakeNodeApiServer:
    def __init__(self, *, token: str | None = None, host: str = "127.0.0.1") -> None:
        self.server = FakeApiServer(token=token, host=host)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)

    @property
    def requests(self) -> list[Request]:
        return list(self.server.calls)

    def add_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                gpu_resource: str = "nvidia.com/gpu", gpus: int = 1, owner_kind: str | None = None,
                labels: Mapping[str, str] | None = None) -> JsonObject:
        """A running pod on ``node`` asking for ``gpus`` of ``gpu_resource``; ``owner_kind``: the kind of its
        controller (ReplicaSet, Job, DaemonSet...), None for an unmanaged pod."""
        return self.server.add_pod(namespace, name, uid=uid, labels=labels, node_name=node,
                                   limits={gpu_resource: str(gpus)} if gpus else None, owner_kind=owner_kind)

    def write_kubeconfig(self, path: str | Path) -> Path:
        return self.server.write_kubeconfig(path)

    def start(self) -> FakeNodeApiServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> FakeNodeApiServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
