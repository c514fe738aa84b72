"""A stand-in API server for ``-m/--configmap-data``: serves one ConfigMap whose content tests change."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

NAMESPACE = "gpu-monitoring"
NAME = "exporter-metrics-config-map"
TOKEN = "test-token"


class ConfigMapServer:
    """``GET /api/v1/namespaces/<ns>/configmaps/<name>`` with a bearer token; ``status`` forces an error."""

    def __init__(self, metrics: str | None) -> None:
        self.metrics = metrics  # None: the ConfigMap has no "metrics" key
        self.status = 200
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._answer(401, {"kind": "Status", "code": 401})
                elif owner.status != 200:
                    self._answer(owner.status, {"kind": "Status", "code": owner.status})
                elif self.path != f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}":
                    self._answer(404, {"kind": "Status", "code": 404})
                else:
                    data = {} if owner.metrics is None else {"metrics": owner.metrics}
                    self._answer(200, {"kind": "ConfigMap", "apiVersion": "v1",
                                       "metadata": {"name": NAME, "namespace": NAMESPACE}, "data": data})

            def _answer(self, code: int, body: dict[str, object]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ConfigMapServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        }))
        return path
