"""``gpu-pod-exporter report quota``: GPU ResourceQuota plans from measured use, and applying them.

It reads the window from Prometheus exactly as ``report --by namespace`` does (the same client,
queries and give-back arithmetic), the ResourceQuotas through the remediator's Kubernetes client
(``exporter.remediate.kubeapi``: one retry policy, one error vocabulary), and prints the plan
(``quota.build_plan``). ``--output yaml`` writes the ResourceQuota patches for review; nothing is
written to the cluster unless ``--apply`` is given, and ``--apply --dry-run`` sends them with
``dryRun=All`` so the API server validates and admits them without persisting anything.

Exit status: 0 with a plan (and every patch applied, with ``--apply``); 2 for a user's mistake, in
one line naming the flag; 1 when Prometheus or the API server cannot be asked, or a patch failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter.prometheus.client import PrometheusError
from exporter.prometheus.flags import OneLineParser, flag_value
from exporter.report.cli import (
    EXIT_OK,
    EXIT_RUNTIME,
    EXIT_USAGE,
    PROG,
    Options,
    UsageError,
    _connection,
    _window,
    add_connection_arguments,
    add_window_arguments,
    check_connection_numbers,
    measure,
)
from exporter.report.model import Settings
from exporter.report.pricing import PriceSheet
from exporter.report.quota import (
    DEFAULT_RESOURCES,
    FIELD_MANAGER,
    NO_DATA,
    PlanSettings,
    QuotaPlan,
    build_plan,
    patches,
    quota_entries,
)
from exporter.report.timespec import format_time
from exporter.units import parse_prometheus_duration

QUOTA_PROG = f"{PROG} quota"


@dataclass(frozen=True)
class QuotaOptions:
    report: Options
    plan: PlanSettings
    cluster: str | None
    kubeconfig: str | None
    namespaces: tuple[str, ...]
    resources: tuple[str, ...]
    output: str
    output_file: Path | None
    apply: bool
    dry_run: bool


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=QUOTA_PROG,
        description="A GPU ResourceQuota plan per namespace from measured use: the current quota, the p95 of GPUs "
                    "in use over the window (as the report's 'GPUs to give back'), that need with headroom, the "
                    "proposed quota and why. Quotas are only lowered; namespaces with too little data are left "
                    "alone and named. Nothing is changed without --apply.",
        epilog="--output yaml writes ResourceQuota objects for 'kubectl apply --server-side --field-manager "
               f"{FIELD_MANAGER} --force-conflicts -f -'. See docs/cost.md, 'Quota plans'.")
    where = add_window_arguments(p)
    where.add_argument("--cluster", metavar="NAME",
                       help="The cluster label value of the cluster whose quotas these are (needed when Prometheus "
                            "holds several).")
    plan = p.add_argument_group("the plan")
    plan.add_argument("--headroom", type=float, default=20.0, metavar="PERCENT",
                      help="Added to the measured need before rounding up to whole devices (default 20).")
    plan.add_argument("--min-quota", type=int, default=0, metavar="N",
                      help="Never propose fewer devices than this (default 0).")
    plan.add_argument("--min-coverage", type=float, default=90.0, metavar="PERCENT",
                      help="Leave a namespace alone when its cluster's data covers less of the window, or its GPUs' "
                           "utilisation was measured for less of the GPU-hours it held (default 90).")
    plan.add_argument("--idle-threshold", type=float, default=5.0, metavar="PERCENT",
                      help="Utilisation below this counts as idle, not in use (default 5).")
    plan.add_argument("--reclaim-by", choices=("p95", "peak"), default="p95",
                      help="The measured need: the p95 (default) or the peak of GPUs in use.")
    plan.add_argument("--namespace", action="append", default=[], metavar="NAME",
                      help="Only this namespace's quotas (repeatable; default every namespace).")
    plan.add_argument("--resource", action="append", default=[], metavar="KEY",
                      help="A ResourceQuota key counting GPUs (repeatable; default "
                           f"{' and '.join(DEFAULT_RESOURCES)}).")
    kube = p.add_argument_group("the cluster")
    kube.add_argument("--kubeconfig", metavar="FILE",
                      help="Kubeconfig to read (and, with --apply, patch) ResourceQuotas with (default: the pod's "
                           "service account).")
    kube.add_argument("--apply", action="store_true",
                      help="Server-side apply the proposed quotas (field manager gpu-pod-exporter-quota).")
    kube.add_argument("--dry-run", action="store_true",
                      help="With --apply: the API server validates and admits every patch but stores nothing.")
    out = p.add_argument_group("output")
    out.add_argument("--output", "-o", choices=("text", "json", "yaml"), default="text",
                     help="The plan as a table (default), JSON, or the ResourceQuota patches as YAML.")
    out.add_argument("--output-file", metavar="FILE", help="Write here instead of standard output.")
    add_connection_arguments(p)
    return p


def options(argv: Sequence[str], now: float) -> QuotaOptions:
    args = parser().parse_args(list(argv))
    if not 0 <= args.idle_threshold <= 100:
        raise UsageError(f"--idle-threshold {args.idle_threshold:g}: must be a percentage between 0 and 100")
    if not 0 <= args.min_coverage <= 100:
        raise UsageError(f"--min-coverage {args.min_coverage:g}: must be a percentage between 0 and 100")
    if args.headroom < 0:
        raise UsageError(f"--headroom {args.headroom:g}: must be >= 0")
    if args.min_quota < 0:
        raise UsageError(f"--min-quota {args.min_quota}: must be >= 0")
    check_connection_numbers(args)
    if args.dry_run and not args.apply:
        raise UsageError("--dry-run goes with --apply (without --apply nothing is sent to the cluster)")
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise UsageError(f"--kubeconfig {args.kubeconfig}: no such file")
    output_file = Path(args.output_file) if args.output_file else None
    if output_file is not None and not output_file.parent.is_dir():
        raise UsageError(f"--output-file {output_file}: the directory {output_file.parent} does not exist")
    timeout = flag_value("--timeout", args.timeout, parse_prometheus_duration)
    connection, shown_url = _connection(args, timeout)
    clusters = (args.cluster,) if args.cluster is not None else ()
    settings = Settings(prometheus=shown_url, by="namespace", idle_threshold_percent=args.idle_threshold,
                        reclaim_by=args.reclaim_by, currency="USD", default_price=None, clusters=clusters)
    report = Options(connection, _window(args, now), settings, PriceSheet(None, {}), "text", "usage", None, 0,
                     args.max_points_per_query, args.max_samples)
    plan = PlanSettings(cluster=args.cluster or "", headroom_percent=args.headroom, min_quota=args.min_quota,
                        min_coverage_percent=args.min_coverage, reclaim_by=args.reclaim_by)
    return QuotaOptions(report, plan, args.cluster, args.kubeconfig, tuple(args.namespace),
                        tuple(args.resource) or DEFAULT_RESOURCES, args.output, output_file, args.apply, args.dry_run)


def which_cluster(known: frozenset[str], asked: str | None) -> str:
    """The cluster label the quotas belong to: --cluster, or the only one Prometheus holds."""
    if asked is not None:
        return asked
    seen = sorted(known)
    if len(seen) > 1:
        raise UsageError(f"Prometheus holds clusters {', '.join(seen)}: name the one whose quotas these are "
                         "with --cluster")
    return seen[0] if seen else ""


def render_text(plan: QuotaPlan) -> str:
    settings = plan.settings
    lines = [f"GPU quota plan for {('cluster ' + plan.cluster) if plan.cluster else 'this Prometheus'}, "
             f"{format_time(plan.window_start)} to {format_time(plan.window_end)}: need = {settings.reclaim_by} of "
             f"GPUs in use, +{settings.headroom_percent:g} % headroom, rounded up; quotas are only lowered.", ""]
    header = ("NAMESPACE", "QUOTA", "RESOURCE", "CURRENT", "USED NOW", "NEED", "+HEADROOM", "PROPOSED", "ACTION",
              "WHY")
    table = [header]
    for row in plan.rows:
        table.append((row.namespace, row.quota, row.resource, str(row.current),
                      "-" if row.used_now is None else str(row.used_now),
                      "-" if row.measured_need is None else f"{row.measured_need:.2f}",
                      "-" if row.with_headroom is None else f"{row.with_headroom:.2f}",
                      str(row.proposed), row.action, row.why))
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
              for r in table]
    if not plan.rows:
        lines.append("(no ResourceQuota with a GPU key)")
    lines.append("")
    changes = plan.changes
    freed = sum(row.current - row.proposed for row in changes)
    lines.append(f"{len(changes)} quota keys to lower, {freed} devices taken back." if changes
                 else "Nothing to lower.")
    if plan.left_alone:
        lines.append(f"Left alone, too little data: {', '.join(plan.left_alone)}.")
    return "\n".join(lines) + "\n"


def render_json(plan: QuotaPlan) -> str:
    data: dict[str, Any] = {
        "cluster": plan.cluster, "start": format_time(plan.window_start), "end": format_time(plan.window_end),
        "settings": dataclasses.asdict(plan.settings),
        "rows": [dataclasses.asdict(row) for row in plan.rows],
        "left_alone": list(plan.left_alone),
        "patches": patches(plan),
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def render_yaml(plan: QuotaPlan) -> str:
    """The patches as a multi-document YAML stream, each preceded by comments saying why."""
    why = {(row.namespace, row.quota): [] for row in plan.changes}  # type: dict[tuple[str, str], list[str]]
    for row in plan.changes:
        why[(row.namespace, row.quota)].append(f"# {row.resource}: {row.current} -> {row.proposed}: {row.why}")
    head = [f"# GPU quota plan, {('cluster ' + plan.cluster) if plan.cluster else 'this Prometheus'}, "
            f"{format_time(plan.window_start)} to {format_time(plan.window_end)}.",
            f"# Apply: kubectl apply --server-side --field-manager {FIELD_MANAGER} --force-conflicts -f <this file>"]
    head += [f"# {row.namespace}/{row.quota} {row.resource}: {row.why}"
             for row in plan.rows if row.action == NO_DATA]
    documents = []
    for body in patches(plan):
        metadata = body["metadata"]
        assert isinstance(metadata, dict)
        comments = why[(str(metadata["namespace"]), str(metadata["name"]))]
        documents.append("\n".join(comments) + "\n" + yaml.safe_dump(body, sort_keys=False))
    if not documents:
        return "\n".join([*head, "# nothing to lower"]) + "\n"
    return "\n".join(head) + "\n" + "---\n".join(documents)


RENDERERS = {"text": render_text, "json": render_json, "yaml": render_yaml}


def apply(kube: Any, plan: QuotaPlan, dry_run: bool) -> int:
    """Server-side apply each patch; one line per object on stderr. EXIT_RUNTIME if any failed."""
    from exporter.remediate.kubeapi import ApiError  # noqa: PLC0415 - only with --apply

    failed = 0
    for body in patches(plan):
        metadata = body["metadata"]
        assert isinstance(metadata, dict)
        where = f"{metadata['namespace']}/{metadata['name']}"
        try:
            answer = kube.apply_resource_quota(body, field_manager=FIELD_MANAGER, dry_run=dry_run)
        except ApiError as error:
            failed += 1
            print(f"{QUOTA_PROG}: error: applying ResourceQuota {where}: {error}", file=sys.stderr)
            continue
        hard = (answer.get("spec") or {}).get("hard") or {}
        keys = ", ".join(f"{key}={hard.get(key)}" for key in body["spec"]["hard"])  # type: ignore[index]
        print(f"{QUOTA_PROG}: {'server dry run: would apply' if dry_run else 'applied'} ResourceQuota {where}: "
              f"{keys}", file=sys.stderr)
    return EXIT_RUNTIME if failed else EXIT_OK


def main(argv: Sequence[str]) -> int:
    try:
        opts = options(argv, time.time())
    except UsageError as error:
        print(f"{QUOTA_PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    from exporter.remediate.kubeapi import ApiError, KubeApi, load_core_api  # noqa: PLC0415

    try:
        kube = KubeApi(load_core_api(opts.kubeconfig), attempts=3)
        entries, notes = quota_entries(kube.list_resource_quotas(), opts.resources, opts.namespaces)
    except ApiError as error:
        print(f"{QUOTA_PROG}: error: reading ResourceQuotas: {error}", file=sys.stderr)
        return EXIT_RUNTIME
    try:
        measured = measure(opts.report)
        cluster = which_cluster(measured.clusters, opts.cluster)
    except PrometheusError as error:
        print(f"{QUOTA_PROG}: error: {error}", file=sys.stderr)
        return EXIT_RUNTIME
    except UsageError as error:
        print(f"{QUOTA_PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    plan = build_plan(measured.report, entries, dataclasses.replace(opts.plan, cluster=cluster))
    for note in notes:
        print(f"{QUOTA_PROG}: warning: {note}", file=sys.stderr)
    output = RENDERERS[opts.output](plan)
    if opts.output_file is None:
        sys.stdout.write(output)
    else:
        try:
            opts.output_file.write_text(output, encoding="utf-8")
        except OSError as error:
            print(f"{QUOTA_PROG}: error: --output-file {opts.output_file}: {error.strerror or error}",
                  file=sys.stderr)
            return EXIT_USAGE
    return apply(kube, plan, opts.dry_run) if opts.apply else EXIT_OK
