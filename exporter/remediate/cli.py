"""``gpu-pod-exporter remediate``: load the policy, connect to the API server, serve the webhook until SIGTERM.

Every mistake in the flags, the policy file, the web config or the token file is one line on
stderr and exit code 2, before anything listens or touches the cluster.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from exporter.config import EXIT_CONFIG_ERROR, PROGRAM, ConfigError
from exporter.logs import configure, get_logger
from exporter.remediate.controller import Remediator
from exporter.remediate.kubeapi import ApiError, KubeApi, load_core_api
from exporter.remediate.policy import MODES, Policy, load_policy
from exporter.remediate.receiver import WebhookReceiver, parse_listen_address
from exporter.remediate.selfmetrics import RemediationMetrics
from exporter.remediate.status import render
from exporter.web.security import load_web_security

log = get_logger("remediate")

EXIT_RUNTIME_ERROR = 1
DEFAULT_ADDRESS = ":9401"
NAME = f"{PROGRAM} remediate"


DESCRIPTION = """\
Act on Alertmanager webhooks (POST /alerts) about unhealthy GPUs, as the
policy (--config) allows and within safety limits: a cooldown per node, at
most max_nodes_per_hour nodes changed (then a breaker a person closes with
POST /breaker/close), at most max_tainted_percent of the GPU nodes out.

What it can do, each an action or a key of the policy:
  Events          on the node and the failed GPU's pods: which GPU, the Xid
                  and what it means
  taint           gpu-pod-exporter/unhealthy-gpu=<gpus>:<effect> on the node,
                  the UnhealthyGPU condition, the unhealthy-gpus annotation;
                  cordon (opt-in)
  device_taints   on DRA nodes, a DeviceTaintRule per failed GPU instead of
                  the node taint
  drain           evict the failed GPUs' pods through the Eviction API
                  (PodDisruptionBudgets hold)
  repair_request  a GpuRepairRequest per node and episode: the hand-off
  validation      a Job of your image must succeed on the node before the
                  marks are lifted

Modes: dry-run (the default: only reports, in GpuRemediationDryRun Events,
what it would do), events (also the alert Events), enforce."""

EPILOG = f"""\
subcommand:
  {NAME} status [--kubeconfig FILE]
                  every node it touched, its state (quarantined, draining and
                  what blocks it, drained, repair-requested, validating,
                  healthy again) and why, read from the nodes

docs/remediation.md: the policy, the state machine, the rollout path."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_CONFIG_ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=NAME, description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    env = os.environ.get
    parser.add_argument("--config", default=env("GPU_POD_EXPORTER_REMEDIATE_CONFIG", ""), metavar="FILE",
                        help="policy file (YAML): mode, allowlisted alerts and their actions, limits "
                             "[$GPU_POD_EXPORTER_REMEDIATE_CONFIG; default: built-in policy, dry-run]")
    parser.add_argument("--mode", choices=MODES, default=env("GPU_POD_EXPORTER_REMEDIATE_MODE") or None,
                        help="override the policy's mode [$GPU_POD_EXPORTER_REMEDIATE_MODE]")
    parser.add_argument("-a", "--address", default=env("GPU_POD_EXPORTER_REMEDIATE_ADDRESS", DEFAULT_ADDRESS),
                        help=f"listen address [default {DEFAULT_ADDRESS}]")
    parser.add_argument("--web-config-file", default=env("GPU_POD_EXPORTER_WEB_CONFIG_FILE", ""), metavar="FILE",
                        help="exporter-toolkit web config: TLS, client certificates, basic-auth users")
    parser.add_argument("--bearer-token-file", default=env("GPU_POD_EXPORTER_REMEDIATE_TOKEN_FILE", ""),
                        metavar="FILE", help="require 'Authorization: Bearer <token>' (what Alertmanager's "
                                             "http_config.authorization sends) on POST /alerts")
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG", ""), metavar="FILE",
                        help="kubeconfig to use [default: the pod's service account]")
    parser.add_argument("--recheck-interval", type=float, default=15.0, metavar="SECONDS",
                        help="how often held or failed changes are tried again [default 15]")
    parser.add_argument("--log-format", choices=("text", "json"), default=env("GPU_POD_EXPORTER_LOG_FORMAT", "text"))
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--check-config", action="store_true",
                        help="load and check every input, print the policy and exit")
    return parser


def _fail(message: str, code: int = EXIT_CONFIG_ERROR) -> int:
    print(f"{NAME}: error: {message}", file=sys.stderr)
    return code


def read_token(path: str) -> str | None:
    """The bearer token in ``path`` (surrounding whitespace removed); raises ConfigError."""
    if not path:
        return None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--bearer-token-file {path}", "bearer-token-file",
                          f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not token or any(ch.isspace() for ch in token):
        raise ConfigError(f"--bearer-token-file {path}", "bearer-token-file",
                          "expected one token (no spaces or line breaks inside)")
    return token


def describe(policy: Policy) -> str:
    lines = [f"mode: {policy.mode} (from {policy.source})", f"node label: {policy.node_label}", "alerts:"]
    for name, alert in sorted(policy.alerts.items()):
        hold = "never" if alert.untaint_after_s is None else f"{alert.untaint_after_s:g}s after resolved"
        lines.append(f"  {name}: actions {', '.join(sorted(alert.actions))}; taint effect {alert.taint_effect}; "
                     f"untaint {hold}")
    limits = policy.limits
    lines.append(f"limits: cooldown {limits.cooldown_s:g}s, at most {limits.max_nodes_per_hour} nodes changed per "
                 f"hour, at most {limits.max_tainted_percent:g}% of GPU nodes tainted "
                 f"(GPU nodes: allocatable {', '.join(limits.gpu_resources)}*)")
    if policy.cluster:
        lines.append(f"cluster: only alerts labelled cluster={policy.cluster}")
    return "\n".join(lines + _beyond_quarantine(policy))


def _beyond_quarantine(policy: Policy) -> list[str]:
    """The policy's drain, repair, device taints and validation, in words."""
    lines = []
    if policy.drain is not None:
        drain = policy.drain
        modes = ", ".join(f"{ns}={mode}" for ns, mode in sorted(drain.namespaces.items()))
        lines.append(f"drain: mode {drain.mode}, deadline {drain.deadline_s:g}s"
                     + (f", namespaces {modes}" if modes else "") + f", pod label {drain.pod_label}, "
                     f"unmanaged pods {'evicted' if drain.unmanaged_pods else 'left alone'}")
    if policy.repair_request:
        lines.append("repair: a GpuRepairRequest per quarantined node")
    if policy.device_taints:
        lines.append("device taints: a DeviceTaintRule per failed GPU on DRA nodes (node taint elsewhere)")
    if policy.validation is not None:
        lines.append(f"validation: Job {policy.validation.image} in {policy.validation.namespace} "
                     "before re-admission")
    return lines


def status_main(argv: Sequence[str]) -> int:
    """``remediate status``: each node the remediator touched, its state and why (read from the nodes)."""
    parser = _Parser(prog=f"{NAME} status", description="Print every node gpu-pod-exporter remediate touched, "
                     "its state (quarantined, draining and what blocks it, drained, repair-requested, validating, "
                     "healthy again) and why, read from the nodes.")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""), metavar="FILE",
                        help="kubeconfig to use [default: the pod's service account]")
    args = parser.parse_args(list(argv))
    try:
        api = KubeApi(load_core_api(args.kubeconfig or None))
        nodes = api.list_nodes()
    except ApiError as exc:
        return _fail(exc.message if exc.status == 0 else str(exc), EXIT_RUNTIME_ERROR)
    print(render(nodes))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[2:] if argv is None else argv)
    if arguments[:1] == ["status"]:
        return status_main(arguments[1:])
    args = build_parser().parse_args(arguments)
    try:
        policy = load_policy(args.config or None, args.mode)
        parse_listen_address(args.address)
        token = read_token(args.bearer_token_file)
        security = load_web_security(args.web_config_file)
    except ConfigError as exc:
        return _fail(str(exc))
    except ValueError as exc:
        return _fail(f"--address: {exc}")
    if args.recheck_interval <= 0:
        return _fail("--recheck-interval: expected a number of seconds > 0")
    if args.check_config:
        print(describe(policy))
        return 0
    configure(args.log_format, args.debug)
    try:
        core = load_core_api(args.kubeconfig or None)
    except ApiError as exc:
        return _fail(exc.message)
    stop = threading.Event()
    metrics = RemediationMetrics(policy.mode)
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    remediator = Remediator(policy, KubeApi(core, stop=stop), metrics, recheck_s=args.recheck_interval,
                            instance=instance)
    try:
        receiver = WebhookReceiver(args.address, remediator, metrics, security, bearer_token=token)
    except OSError as exc:
        return _fail(f"cannot listen on {args.address}: {exc.strerror or exc}", EXIT_RUNTIME_ERROR)
    if not receiver.credentials.required:
        log.warning("the webhook accepts alerts from anyone: set --bearer-token-file or basic-auth users "
                    "in --web-config-file")
    log.info("remediate listening", extra={"fields": {"address": args.address, "port": receiver.port,
                                                      "mode": policy.mode, "policy": policy.source,
                                                      "alerts": ",".join(sorted(policy.alerts))}})
    if policy.mode != "enforce":
        log.warning(f"mode {policy.mode}: no node is changed; decisions are logged and recorded as Events")

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", extra={"fields": {"signal": signal.Signals(signum).name}})
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    remediator.start()
    receiver.start()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        receiver.stop()
        remediator.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        logging.shutdown()
    return 0
