"""What a GPU fleet costs its Prometheus: series and bytes per node, samples per second, rule evaluation.

``python -m bench.fleetcost [--nodes 50] [--out docs/fleet-cost.json]``

1. Per node: the real exporter runs a simulated 8-GPU node (``--simulate``, its fake kubelet and API
   server, the default counters) twice: with 8 GPU pods (one per GPU, the usual case) and with 110
   GPU pods time-slicing the 8 GPUs (110 is Kubernetes' pod limit per node: the worst case, every
   pod on a GPU's series). Measured: series per scrape, bytes as text, bytes as Prometheus fetches
   them (its Accept header, gzip).
2. Rules: each exposition is served as ``--nodes`` nodes (node name and GPU UUIDs rewritten per node),
   and the worst case also as half as many, to a real Prometheus (Debian's) that loads deploy/rules
   and scrapes them every 15 s.
   Measured: series each recording rule produces, and the evaluation time of each rule group
   (median over several evaluations), which grows with the input series, i.e. with the nodes.

docs/fleet.md extrapolates these to 1,000 and 5,000 nodes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from bench.runner import REPO_ROOT, free_port
from bench.scenarios import write_scenario
from tests.support.http import QuietHandler, serving

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
RULE_FILES = sorted((REPO_ROOT / "deploy" / "rules").glob("*.yaml"))
NODE_NAME = "bench-node"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read(), dict(response.headers)


def _until(check: Callable[[], Any], deadline_s: float, what: str) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        try:
            result = check()
        except (OSError, urllib.error.URLError):
            result = None
        if result:
            return result
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.5)


def node_exposition(gpus: int, pods: int, workdir: Path) -> dict[str, Any]:
    """Run the exporter on a simulated node; what one scrape by Prometheus costs."""
    scenario = write_scenario(workdir, gpus, pods)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "exporter", "--simulate", str(scenario), "--address",
                                f"127.0.0.1:{port}", "--collect-interval", "1000"], cwd=REPO_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def labelled() -> str | None:
            text = _get(f"http://127.0.0.1:{port}/metrics")[0].decode()
            info = [line for line in text.splitlines() if line.startswith("DCGM_EXP_GPU_ALLOCATION_INFO{")]
            return text if len(info) >= pods and "DCGM_EXP_CONTAINER_FB_USED{" in text else None

        text = _until(labelled, 60, f"{pods} pods attributed")
        body, headers = _get(f"http://127.0.0.1:{port}/metrics",
                             {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
        plain = gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body
    finally:
        process.terminate()
        process.wait(10)
    samples = [line for line in plain.decode().splitlines() if line and not line.startswith("#")]
    return {"gpus": gpus, "pods": pods, "series": len(samples), "text_bytes": len(text.encode()),
            "scrape_bytes": len(body), "content_type": headers.get("Content-Type", ""), "exposition": text}


def node_copies(text: str, nodes: int) -> list[bytes]:
    """The exposition of ``nodes`` distinct nodes: node name and GPU UUIDs made unique per copy."""
    return [text.replace(f'Hostname="{NODE_NAME}"', f'Hostname="node-{index:04d}"')
            .replace('UUID="GPU-', f'UUID="GPU-{index:04d}').replace('"MIG-', f'"MIG-{index:04d}').encode()
            for index in range(nodes)]


@contextmanager
def _serve(bodies: Sequence[bytes]) -> Iterator[int]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.answer(200, bodies[int(self.path.rsplit("/", 1)[-1])], "text/plain; version=0.0.4")

    with serving(Handler) as server:
        yield int(server.server_address[1])


def rule_cost(text: str, nodes: int, evaluations: int = 6, interval_s: int = 15) -> dict[str, Any]:
    """Serve ``nodes`` copies to a real Prometheus with our rules; series recorded, evaluation times."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed (apt-get install prometheus)")
    workdir = Path(tempfile.mkdtemp(prefix="gpe-fleetcost-"))
    try:
        with _serve(node_copies(text, nodes)) as port:
            config = {
                "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s"},
                "rule_files": [str(path) for path in RULE_FILES],
                "scrape_configs": [{"job_name": "gpu-pod-exporter", "honor_labels": True, "static_configs": [
                    {"targets": [f"127.0.0.1:{port}"],
                     "labels": {"__metrics_path__": f"/node/{index}", "instance": f"node-{index:04d}"}}
                    for index in range(nodes)]}],
            }
            (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
            web = free_port()
            process = subprocess.Popen([binary, f"--config.file={workdir / 'prometheus.yml'}",
                                        f"--storage.tsdb.path={workdir / 'data'}",
                                        f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                return _measure_rules(f"http://127.0.0.1:{web}", nodes, evaluations, interval_s)
            finally:
                process.terminate()
                process.wait(30)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _api(base: str, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    return json.loads(_get(f"{base}/api/v1/{path}{query}")[0])["data"]


def _measure_rules(base: str, nodes: int, evaluations: int, interval_s: int) -> dict[str, Any]:
    _until(lambda: _api(base, "query", query='count(up == 1)')["result"] and
           int(_api(base, "query", query='count(up == 1)')["result"][0]["value"][1]) == nodes, 120, "every target up")
    times: dict[str, list[float]] = {}
    last: dict[str, str] = {}
    end = time.monotonic() + (evaluations + 3) * interval_s
    while time.monotonic() < end and min((len(v) for v in times.values()), default=0) < evaluations:
        for group in _api(base, "rules")["groups"]:
            stamp = group.get("lastEvaluation", "")
            if stamp and stamp != last.get(group["name"]) and not stamp.startswith("0001"):
                last[group["name"]] = stamp
                times.setdefault(group["name"], []).append(float(group["evaluationTime"]))
        time.sleep(1.0)
    recorded = {}
    for group in _api(base, "rules")["groups"]:
        for rule in group["rules"]:
            if rule["type"] == "recording":
                result = _api(base, "query", query=f"count({rule['name']})")["result"]
                recorded[rule["name"]] = int(result[0]["value"][1]) if result else 0
    head = _api(base, "status/tsdb")["headStats"]
    return {"nodes": nodes, "interval_s": interval_s, "head_series": int(head["numSeries"]),
            "group_evaluation_s": {name: statistics.median(values[1:] or values) for name, values in times.items()},
            "recorded_series": recorded}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleetcost", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50, help="simulated nodes for the rule evaluation")
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="gpe-fleetcost-") as directory:
        usual = node_exposition(8, 8, Path(directory))
        worst = node_exposition(8, 110, Path(directory))
    usual_text, worst_text = usual.pop("exposition"), worst.pop("exposition")
    rules = {"usual": rule_cost(usual_text, args.nodes), "worst": rule_cost(worst_text, args.nodes),
             "worst_half_the_nodes": rule_cost(worst_text, args.nodes // 2)}  # linear in the nodes?
    results = {"per_node": [usual, worst], "rules": rules}
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
