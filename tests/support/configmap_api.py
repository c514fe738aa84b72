"""The ConfigMap ``-m/--configmap-data`` reads, served by the one fake API server (simulator.fakeapiserver).

``ConfigMapApi`` is that server with the ConfigMap in place, a bearer token, and the grant the chart's
Role gives with ``-m`` (``get`` on configmaps). Tests change what a user's cluster would change:
``metrics`` (the ConfigMap's key; None: the key is missing) and ``status`` (what the server answers
instead: 404 the ConfigMap is gone, 403 no RBAC, 500/503 an outage, 200 all well again).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from simulator.fakeapiserver import OUTAGES, FakeApiServer

NAMESPACE = "gpu-monitoring"
NAME = "exporter-metrics-config-map"
TOKEN = "test-token"
CONFIGMAP_GRANT = {"configmaps": frozenset({"get"})}


class ConfigMapApi:
    def __init__(self, metrics: str | None) -> None:
        self.api = FakeApiServer(token=TOKEN)
        self.api.access.grant(CONFIGMAP_GRANT)
        self._metrics = metrics
        self._status = 200
        self._publish()

    def _publish(self) -> None:
        gone = self._status == 404
        self.api.set_configmap(NAMESPACE, NAME, None if gone else {} if self._metrics is None
                               else {"metrics": self._metrics})

    @property
    def metrics(self) -> str | None:
        return self._metrics

    @metrics.setter
    def metrics(self, text: str | None) -> None:
        self._metrics = text
        self._publish()

    @property
    def status(self) -> int:
        return self._status

    @status.setter
    def status(self, code: int) -> None:
        if code not in (200, 403, 404) and str(code) not in OUTAGES:
            raise ValueError(f"no way to make the fake API server answer {code} here")
        self._status = code
        self.api.set_outage(str(code) if str(code) in OUTAGES else None)
        if code == 403:
            self.api.access.forbid("configmaps")
        else:
            self.api.access.grant(CONFIGMAP_GRANT)
        self._publish()

    def write_kubeconfig(self, path: Path) -> Path:
        return self.api.write_kubeconfig(path)

    def __enter__(self) -> ConfigMapApi:
        self.api.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.api.stop()
