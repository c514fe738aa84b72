"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, each a process of this user, with its state in one directory.

Authentication is real: the admin kubeconfig carries a client certificate signed by the cluster's
CA (group ``system:masters``); the controller-manager, the scheduler and kwok authenticate with
tokens from ``--token-auth-file`` as their usual identities (``system:kube-controller-manager``,
``system:kube-scheduler``), so RBAC decides what they may do, as in a real cluster. Service-account
tokens are signed by a key pair of this cluster; the controller-manager runs the service-account
and token controllers (``--use-service-account-credentials``), the scheduler binds pods, and kwok
plays the kubelet for the fake nodes (status only: nothing runs).

Every process is started in its own session with its pid in ``<state>/pids/``; ``down`` stops
exactly those (after checking that the pid still runs the binary ``up`` started), so it never
touches another cluster or anything else on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcluster import build, nodes, pki
from devcluster.api import Api, ApiError

DATA = Path(__file__).resolve().parent / "data"
SERVICE_CIDR = "10.0.0.0/24"
START_DEADLINE_S = 180.0  # a loaded 2-core machine: the API server alone can take a minute

#: The order ``up`` starts them in; ``down`` stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: The programs of real kubelet nodes (devcluster/kubelets.py), stopped by ``down`` too.
NODE_PROGRAMS = ("kubelet", "gpu-node")


class ClusterError(Exception):
    """The cluster could not be brought up (or down); the message says which component and why."""


@dataclass(frozen=True)
class Cluster:
    """What a running cluster offers its users: paths and addresses in its state directory."""

    state_dir: Path
    server: str
    etcd_url: str
    kubeconfig: Path
    ca_file: Path
    admin_cert: Path
    admin_key: Path

    def admin(self) -> Api:
        """A client with the admin (system:masters) identity."""
        return Api(self.server, self.ca_file, self.admin_cert, self.admin_key)

    @staticmethod
    def load(state_dir: Path) -> Cluster:
        """The cluster whose state is in ``state_dir`` (written by ``up``)."""
        info = json.loads((state_dir / "cluster.json").read_text(encoding="utf-8"))
        return Cluster(state_dir=state_dir, server=info["server"], etcd_url=info["etcd_url"],
                       kubeconfig=Path(info["kubeconfig"]), ca_file=Path(info["ca_file"]),
                       admin_cert=Path(info["admin_cert"]), admin_key=Path(info["admin_key"]))


def default_state_dir() -> Path:
    """Where ``up`` and ``down`` keep a cluster when not told: one per user."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"  # noqa: S108 (per-user name below)
    return Path(base) / f"gpu-pod-exporter-cluster-{os.getuid()}"


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str]) -> Path:
    """A kubeconfig file (JSON is YAML) with one cluster, one user, one context."""
    name = "gpu-pod-exporter-test"
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "user"}}],
        "current-context": name,
    }
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class _Processes:
    """The processes one ``up`` started: pidfiles, logs, liveness."""

    def __init__(self, state_dir: Path) -> None:
        self.pids = state_dir / "pids"
        self.logs = state_dir / "logs"
        self.pids.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], exe: str | None = None) -> None:
        """Start ``argv``; ``exe`` is what its command line's first word will be once running (a
        wrapper that execs, such as unshare, names its target here), argv[0] when not given."""
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
        log.close()
        self.procs[name] = proc
        (self.pids / f"{name}.pid").write_text(f"{proc.pid}\n{exe or argv[0]}\n", encoding="utf-8")
        (self.pids / f"{name}.argv.json").write_text(json.dumps(argv), encoding="utf-8")

    def check(self, name: str) -> None:
        """ClusterError with the log tail if ``name`` has exited."""
        proc = self.procs[name]
        if proc.poll() is not None:
            raise ClusterError(f"{name} exited with status {proc.returncode} while starting; "
                               f"the end of {self.logs / (name + '.log')}:\n{_log_tail(self.logs / (name + '.log'))}")

    def wait_for(self, name: str, what: str, ready: Callable[[], bool], deadline_s: float = START_DEADLINE_S) -> None:
        """Poll ``ready`` until true; ClusterError if ``name`` dies or the deadline passes."""
        end = time.monotonic() + deadline_s
        while True:
            self.check(name)
            try:
                if ready():
                    return
            except (OSError, ApiError, ValueError, KeyError):
                pass
            if time.monotonic() > end:
                raise ClusterError(f"{name}: {what} not reached within {deadline_s:.0f} s; the end of its log:\n"
                                   f"{_log_tail(self.logs / (name + '.log'))}")
            time.sleep(0.25)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            return bool(resp.status == 200)
    except urllib.error.URLError:
        return False


def _insecure() -> ssl.SSLContext:
    """For the self-signed health ports of the controller-manager and scheduler (liveness only)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# Kubernetes 1.36: DRADeviceTaints is on by default, DRADeviceTaintRules (beta, on an off-by-default API) is not.
DEVICE_TAINT_GATES = "--feature-gates=DRADeviceTaintRules=true"


def up(state_dir: Path, nodes_file: Path | None = None, log: Callable[[str], None] = print) -> Cluster:
    """Start a cluster in ``state_dir`` (which must not hold a running one) and create its nodes."""
    if (state_dir / "pids").is_dir() and any(_running(p) for p in (state_dir / "pids").glob("*.pid")):
        raise ClusterError(f"a cluster already runs in {state_dir}: run `scripts/cluster down` first")
    node_list = nodes.load(nodes_file or DATA / "nodes.yaml")
    bins = {name: build.build(name) for name in COMPONENTS}
    state_dir.mkdir(parents=True, exist_ok=True)
    # A new cluster every time: nothing of a previous one in this directory (etcd's data above all).
    for stale in ("etcd", "pki", "logs", "pids", "apiserver-certs", "kcm-certs", "scheduler-certs"):
        shutil.rmtree(state_dir / stale, ignore_errors=True)
    pki_dir = state_dir / "pki"
    ca = pki.Authority(pki_dir)
    serving = ca.issue("apiserver", "kube-apiserver", server_names=(
        "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local"), server_ips=("127.0.0.1", "10.0.0.1"))
    admin = ca.issue("admin", "admin", organizations=("system:masters",))
    sa = pki.service_account_keys(pki_dir)
    tokens = {name: os.urandom(24).hex() for name in ("kcm", "scheduler", "kwok")}
    token_file = pki_dir / "tokens.csv"
    token_file.write_text(
        f'{tokens["kcm"]},system:kube-controller-manager,uid-kcm\n'
        f'{tokens["scheduler"]},system:kube-scheduler,uid-scheduler\n'
        # kwok writes node and pod status for every fake node: an admin's rights, as kwokctl gives it.
        f'{tokens["kwok"]},kwok-controller,uid-kwok,"system:masters"\n', encoding="utf-8")
    token_file.chmod(0o600)

    procs = _Processes(state_dir)
    try:
        etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        procs.start("etcd", [
            str(bins["etcd"]), "--name", "default", "--data-dir", str(state_dir / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync", "--log-level", "warn"])
        procs.wait_for("etcd", "/health", lambda: _http_ok(f"{etcd_url}/health"))
        log(f"etcd ready on {etcd_url}")

        server = f"https://127.0.0.1:{api_port}"
        procs.start("kube-apiserver", [
            str(bins["kube-apiserver"]), "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(api_port),
            "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
            "--client-ca-file", str(ca.pair.cert), "--token-auth-file", str(token_file),
            "--authorization-mode", "Node,RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(sa.cert), "--service-account-signing-key-file", str(sa.key),
            "--service-cluster-ip-range", SERVICE_CIDR, "--allow-privileged=true",
            # the DRA API's beta versions too (off by default): a cluster of Kubernetes 1.32 or 1.33
            # serves ResourceSlices only there, and the exporter reads them there
            # (tests/platform/test_resourceslices.py compares what each version answers).
            "--runtime-config", "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true,"
            # DeviceTaintRules (per-GPU quarantine, tests/platform/test_device_taints.py): served in 1.36 only in
            # v1beta2 and only when asked for; the scheduler and the controller-manager's device-taint-eviction
            # controller act on them with the DRADeviceTaintRules gate (DEVICE_TAINT_GATES). Nothing else
            # creates such rules, so no other test's cluster behaves differently.
            "resource.k8s.io/v1beta2/devicetaintrules=true", DEVICE_TAINT_GATES,
            # compaction only when a test asks (etcd's /v3/kv/compaction): its 410s are then the test's.
            "--etcd-compaction-interval=0",
            # a new Node gets no node.kubernetes.io/not-ready taint: the node-lifecycle controller that
            # would lift it is off (see the controller-manager's flags), and kwok keeps the nodes Ready.
            "--disable-admission-plugins=TaintNodesByCondition",
            "--cert-dir", str(state_dir / "apiserver-certs"), "--v=1"])
        admin_api = Api(server, ca.pair.cert, admin.cert, admin.key)
        procs.wait_for("kube-apiserver", "/readyz", lambda: admin_api.ok("/readyz"))
        log(f"kube-apiserver ready on {server}")

        kubeconfig = _kubeconfig(state_dir / "admin.kubeconfig", server, ca.pair.cert,
                                 {"client-certificate": str(admin.cert), "client-key": str(admin.key)})
        kcm_conf = _kubeconfig(state_dir / "kube-controller-manager.kubeconfig", server, ca.pair.cert,
                               {"token": tokens["kcm"]})
        sched_conf = _kubeconfig(state_dir / "kube-scheduler.kubeconfig", server, ca.pair.cert,
                                 {"token": tokens["scheduler"]})
        kwok_conf = _kubeconfig(state_dir / "kwok.kubeconfig", server, ca.pair.cert, {"token": tokens["kwok"]})

        kcm_port = free_port()
        procs.start("kube-controller-manager", [
            str(bins["kube-controller-manager"]), "--kubeconfig", str(kcm_conf),
            "--authentication-kubeconfig", str(kcm_conf), "--authorization-kubeconfig", str(kcm_conf),
            "--bind-address", "127.0.0.1", "--secure-port", str(kcm_port),
            "--cert-dir", str(state_dir / "kcm-certs"),
            "--use-service-account-credentials", "--leader-elect=false",
            "--service-account-private-key-file", str(sa.key), "--root-ca-file", str(ca.pair.cert),
            "--cluster-signing-cert-file", str(ca.pair.cert), "--cluster-signing-key-file", str(ca.pair.key),
            # no kubelets: the node-lifecycle controller would taint kwok's nodes whenever a heartbeat
            # is late on a loaded machine; nothing here tests node health timing.
            "--controllers", "*,-node-lifecycle-controller,-node-ipam-controller",
            DEVICE_TAINT_GATES, "--v=1"])
        sched_port = free_port()
        sched_cfg = state_dir / "kube-scheduler.yaml"
        sched_cfg.write_text(json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(sched_conf)}, "leaderElection": {"leaderElect": False},
        }) + "\n", encoding="utf-8")
        procs.start("kube-scheduler", [
            str(bins["kube-scheduler"]), "--config", str(sched_cfg),
            "--authentication-kubeconfig", str(sched_conf), "--authorization-kubeconfig", str(sched_conf),
            "--bind-address", "127.0.0.1", "--secure-port", str(sched_port),
            "--cert-dir", str(state_dir / "scheduler-certs"), DEVICE_TAINT_GATES, "--v=1"])
        procs.wait_for("kube-controller-manager", "/healthz",
                       lambda: _http_ok(f"https://127.0.0.1:{kcm_port}/healthz", _insecure()))
        procs.wait_for("kube-scheduler", "/healthz",
                       lambda: _http_ok(f"https://127.0.0.1:{sched_port}/healthz", _insecure()))
        # The ServiceAccount controller runs once namespace "default" has its "default" account.
        procs.wait_for("kube-controller-manager", "ServiceAccount default/default",
                       lambda: admin_api.get("/api/v1/namespaces/default/serviceaccounts/default") is not None)
        log("kube-controller-manager and kube-scheduler ready")

        procs.start("kwok", [
            str(bins["kwok"]), "--kubeconfig", str(kwok_conf), "--config", str(DATA / "kwok-stages.yaml"),
            "--manage-nodes-with-annotation-selector", f"{nodes.KWOK_ANNOTATION}=fake",
            "--node-ip", "10.1.0.1", "--cidr", "10.2.0.0/16",
            "--server-address", f"127.0.0.1:{free_port()}", "--node-lease-duration-seconds", "0"])
        for node in node_list:
            admin_api.apply_create("/api/v1/nodes", node)
        names = [n["metadata"]["name"] for n in node_list]
        procs.wait_for("kwok", f"all {len(names)} nodes Ready", lambda: _all_ready(admin_api, names))
        log(f"kwok ready: {len(names)} nodes")
    except BaseException:
        stopped = down(state_dir)
        if stopped:
            log(f"stopped what had started: {', '.join(stopped)}")
        raise

    cluster = Cluster(state_dir=state_dir, server=server, etcd_url=etcd_url, kubeconfig=kubeconfig,
                      ca_file=ca.pair.cert, admin_cert=admin.cert, admin_key=admin.key)
    (state_dir / "cluster.json").write_text(json.dumps({
        "server": server, "etcd_url": etcd_url, "kubeconfig": str(kubeconfig), "ca_file": str(ca.pair.cert),
        "admin_cert": str(admin.cert), "admin_key": str(admin.key)}, indent=2) + "\n", encoding="utf-8")
    return cluster


def _all_ready(api: Api, names: list[str]) -> bool:
    items = {n["metadata"]["name"]: n for n in api.get("/api/v1/nodes")["items"]}
    for name in names:
        conditions = (items.get(name, {}).get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return False
    return True


def _pidfile(path: Path) -> tuple[int, str]:
    pid_line, _, exe = path.read_text(encoding="utf-8").partition("\n")
    return int(pid_line), exe.strip()


def _running(path: Path) -> bool:
    """Whether the pidfile's process still runs the binary it was started with."""
    try:
        pid, exe = _pidfile(path)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, ValueError):
        return False
    return cmdline == exe


def down(state_dir: Path, grace_s: float = 20.0) -> list[str]:
    """Stop what ``up`` started in ``state_dir`` (reverse order); return the names stopped.

    The pidfiles say what ``up`` started; a component process whose pidfile was lost (an ``up``
    interrupted between start and pidfile, a state directory tidied by hand) is still found by its
    command line, which names files in this state directory, and stopped too.
    """
    from devcluster import kubelets  # noqa: PLC0415 (kubelets builds on this module)

    pids = state_dir / "pids"
    stopped: list[str] = kubelets.stop_all(state_dir, grace_s)
    for name in reversed(COMPONENTS):
        path = pids / f"{name}.pid"
        if not path.exists():
            continue
        if _stop(path, grace_s):
            stopped.append(name)
        path.unlink()
        (pids / f"{name}.argv.json").unlink(missing_ok=True)
    for pid, name in _strays(state_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        stopped.append(f"{name} (pid {pid}, no pidfile)")
    return stopped


def _strays(state_dir: Path) -> list[tuple[int, str]]:
    """Component processes whose arguments point into ``state_dir`` (ours, whatever their pidfile says)."""
    markers = {f"{state_dir}/", f"{state_dir.resolve()}/"}
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if argv and Path(argv[0]).name in (*COMPONENTS, *NODE_PROGRAMS) and any(
                m in a for a in argv[1:] for m in markers):
            found.append((int(proc.name), Path(argv[0]).name))
    return found


def _stop(path: Path, grace_s: float) -> bool:
    """SIGTERM the pidfile's process, SIGKILL after ``grace_s``; False when it was not running."""
    if not _running(path):
        return False
    pid, _ = _pidfile(path)
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + grace_s
    while _running(path) and time.monotonic() < end:
        _reap(pid)
        time.sleep(0.1)
    if _running(path):
        os.kill(pid, signal.SIGKILL)
        while _running(path):
            _reap(pid)
            time.sleep(0.05)
    return True


def restart_apiserver(cluster: Cluster) -> None:
    """Stop kube-apiserver and start it again with the same flags, then wait for /readyz.

    Every watch is cut; the new server's watch cache starts at etcd's current revision, so a
    client that resumes from a revision etcd has compacted gets a real 410 Gone.
    """
    procs = _Processes(cluster.state_dir)
    name = "kube-apiserver"
    argv = json.loads((procs.pids / f"{name}.argv.json").read_text(encoding="utf-8"))
    _stop(procs.pids / f"{name}.pid", grace_s=20.0)
    procs.start(name, argv)
    procs.wait_for(name, "/readyz", lambda: cluster.admin().ok("/readyz"))


def _reap(pid: int) -> None:
    """Collect our own exited child (a zombie still has a /proc/<pid>/cmdline until reaped)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def etcd_compact(cluster: Cluster) -> int:
    """Compact etcd at its current revision (its JSON gateway); return that revision.

    A watch that resumes from an older resourceVersion afterwards gets the API server's real
    410 Gone.
    """
    def post(path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(cluster.etcd_url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision
