"""``gpu-pod-exporter report``: the command line of the cost and waste report.

Exit status: 0 with a report; 2 for a user's mistake (a bad flag value, an unreadable token
file, ``--format html`` without matplotlib), with one line naming it; 1 when Prometheus cannot
be asked or holds no GPU allocation data for the window.
"""

from __future__ import annotations

import argparse
import calendar
import dataclasses
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from exporter.conditions import IDLE_BELOW_PERCENT
from exporter.prometheus.client import (
    PROMETHEUS_MAX_POINTS,
    Connection,
    PrometheusClient,
    PrometheusError,
    split_url,
)
from exporter.prometheus.flags import FlagError, OneLineParser, add_security_arguments, flag_value, secured
from exporter.report.chargeback import SHARE_MODES, UNLABELLED, GroupBy, build_chargeback, fetch_chargeback
from exporter.report.collect import Queries, cluster_matcher, fetch
from exporter.report.compute import build_report
from exporter.report.export import MissingParquetLibraryError, export, require_pyarrow
from exporter.report.html import render_html
from exporter.report.model import Report, Settings, Window
from exporter.report.plots import MissingPlotLibraryError, require_matplotlib
from exporter.report.pricing import PriceSheet, parse_prices
from exporter.report.pricingfile import PricingFileError, load_pricing
from exporter.report.sources import ALLOCATION_INPUTS, FRACTION, RULE_FILE
from exporter.report.tables import TABLES
from exporter.report.text import render_csv, render_json, render_text
from exporter.report.timespec import format_time, parse_time
from exporter.units import parse_prometheus_duration

PROG = "gpu-pod-exporter report"
EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2
DEFAULT_RANGE = "7d"


# A user's mistake on the command line; the message names the flag (the shared flags raise it too).
UsageError = FlagError


@dataclass(frozen=True)
class Options:
    connection: Connection
    window: Window
    settings: Settings
    prices: PriceSheet
    output_format: str
    table: str
    output: Path | None
    top_pods: int
    max_points: int
    max_samples: int
    group_by: GroupBy | None = None
    share_idle: str = "none"
    previous: Window | None = None
    export_dir: Path | None = None


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="GPU cost and waste report per team or namespace from Prometheus (Thanos, Mimir): "
                    "allocated, busy and idle GPU-hours, memory, energy, cost, GPUs to give back and the most "
                    "idle pods. Reads the recording rules of deploy/rules/gpu-pod-exporter-recording.yaml.",
        epilog="Times are RFC 3339 (2025-06-01T00:00:00Z), dates (2025-06-01, midnight UTC) or Unix seconds; "
               "durations are Prometheus durations (90s, 15m, 12h, 7d). See docs/cost.md.")
    where = add_window_arguments(p)
    where.add_argument("--by", choices=("team", "namespace"), default="team", help="Rows per team or per namespace.")
    where.add_argument("--cluster", action="append", default=[], metavar="NAME",
                       help="Only this value of the cluster label (repeatable).")
    money = p.add_argument_group("cost and waste")
    money.add_argument("--price-per-gpu-hour", action="append", default=[], metavar="PRICE|MODEL=PRICE",
                       help="Price of one whole-GPU hour: a number for every model, or 'MODEL=PRICE' for one "
                            "modelName (repeatable).")
    money.add_argument("--pricing", metavar="FILE",
                       help="Pricing file (YAML): prices per model, MIG profile and node pool, on-prem amortisation, "
                            "energy per kWh, cloud list prices (docs/cost.md, 'The pricing file'). Adds the "
                            "chargeback table.")
    money.add_argument("--currency", help="Currency name printed beside costs (default: the pricing file's, or USD).")
    money.add_argument("--group-by", metavar="team|namespace|label:KEY|annotation:KEY",
                       help="Cost groups of the chargeback table (default: --by): a pod label or annotation, then the "
                            "namespace's, else the line 'unlabelled' (or the namespace, --group-fallback namespace).")
    money.add_argument("--group-fallback", choices=(UNLABELLED, "namespace"), default=UNLABELLED,
                       help="Where pods without the --group-by label go (default: the line 'unlabelled').")
    money.add_argument("--share-idle", choices=SHARE_MODES, default=None,
                       help="Unallocated capacity: billed to '(unallocated)' (none, the default), shared evenly among "
                            "each cluster's cost groups, or in proportion to their GPU cost.")
    money.add_argument("--idle-threshold", type=float, default=IDLE_BELOW_PERCENT, metavar="PERCENT",
                       help=f"Utilisation below this counts as idle (default {IDLE_BELOW_PERCENT:g}, as the "
                            "GpuAllocatedButIdle alert).")
    money.add_argument("--reclaim-by", choices=("p95", "peak"), default="p95",
                       help="GPUs a namespace needs: the p95 (default) or the peak of GPUs in use.")
    money.add_argument("--top-pods", type=int, default=10, metavar="N", help="How many idle pods to list (default 10).")
    out = p.add_argument_group("output")
    out.add_argument("--format", choices=("text", "csv", "json", "html"), default="text")
    out.add_argument("--table", choices=tuple(TABLES), default="usage", help="The table --format csv writes.")
    out.add_argument("--output", "-o", metavar="FILE", help="Write here instead of standard output.")
    out.add_argument("--export-dir", metavar="DIR",
                     help="Also write the chargeback of the period as chargeback-<start>_<end>.csv and .parquet "
                          "(versioned schema, docs/cost.md) into DIR.")
    add_connection_arguments(p)
    return p


def add_window_arguments(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Prometheus and the window: the arguments ``report`` and ``report quota`` share."""
    where = p.add_argument_group("what to report")
    where.add_argument("--prometheus", required=True, metavar="URL",
                       help="Prometheus-compatible API base URL, with any path prefix "
                            "(http://prometheus:9090, http://mimir/prometheus, https://thanos-query:10902).")
    where.add_argument("--range", metavar="DURATION",
                       help=f"Length of the window ending at --end (default {DEFAULT_RANGE} without --start).")
    where.add_argument("--start", metavar="TIME", help="Start of the window.")
    where.add_argument("--end", metavar="TIME", help="End of the window (default: now, rounded down to the step).")
    where.add_argument("--period", metavar="YYYY-MM|previous-month",
                       help="A calendar month (UTC) instead of --start/--end/--range; the chargeback compares it "
                            "with the month before.")
    where.add_argument("--step", default="1m", metavar="DURATION",
                       help="Resolution: each point stands for this long (default 1m; the rule evaluation interval "
                            "makes every evaluation count once).")
    return where


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """How to reach Prometheus: the arguments ``report`` and ``report quota`` share."""
    conn = p.add_argument_group("connection")
    add_security_arguments(conn)
    conn.add_argument("--allow-partial", action="store_true",
                      help="Accept partial answers (Thanos partial_response=true); they are flagged in the report.")
    conn.add_argument("--timeout", default="2m", metavar="DURATION", help="Per-request timeout (default 2m).")
    conn.add_argument("--retries", type=int, default=4, metavar="N",
                      help="Retries of a failed request, with jittered backoff (default 4).")
    conn.add_argument("--max-points-per-query", type=int, default=PROMETHEUS_MAX_POINTS, metavar="N",
                      help=f"Points per series in one range query (at most {PROMETHEUS_MAX_POINTS:,}).")
    conn.add_argument("--max-samples", type=int, default=5_000_000, metavar="N",
                      help="Series x points in one answer before queries are cut smaller (default 5,000,000).")


_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def _month_start(year: int, month: int) -> float:
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def _period(text: str, now: float) -> tuple[float, float, float]:
    """(start, end, start of the month before) of ``--period``."""
    if text == "previous-month":
        today = datetime.fromtimestamp(now, UTC)
        year, month = (today.year, today.month - 1) if today.month > 1 else (today.year - 1, 12)
    else:
        match = _MONTH.match(text)
        if match is None or not 1 <= int(match.group(2)) <= 12:
            raise UsageError(f"--period {text!r}: expected YYYY-MM (a calendar month) or previous-month")
        year, month = int(match.group(1)), int(match.group(2))
    after = (year, month + 1) if month < 12 else (year + 1, 1)
    before = (year, month - 1) if month > 1 else (year - 1, 12)
    return _month_start(year, month), _month_start(*after), _month_start(*before)


def _window(args: argparse.Namespace, now: float) -> Window:
    if args.period:
        if args.start or args.end or args.range:
            raise UsageError("--period with --start, --end or --range: give the month or the window, not both")
        step = flag_value("--step", args.step, parse_prometheus_duration)
        first, last, _ = _period(args.period, now)
        return Window(first, first + int((last - first) // step) * step, step)
    step = flag_value("--step", args.step, parse_prometheus_duration)
    length = flag_value("--range", args.range, parse_prometheus_duration) if args.range else None
    start = flag_value("--start", args.start, parse_time) if args.start else None
    end = flag_value("--end", args.end, parse_time) if args.end else None
    if start is not None and length is not None:
        if end is not None:
            raise UsageError("--range with both --start and --end: give two of the three")
        end = start + length
    if end is None:
        end = (now // step) * step
    if start is None:
        start = end - (length if length is not None else parse_prometheus_duration(DEFAULT_RANGE))
    if end <= start:
        raise UsageError(f"the window is empty: --end ({format_time(end)}) is not after --start ({format_time(start)})")
    points = int((end - start) // step)
    if points < 1:
        raise UsageError(f"--step {args.step}: longer than the window ({end - start:g} s)")
    return Window(start, start + points * step, step)


def options(argv: Sequence[str], now: float) -> Options:
    args = parser().parse_args(list(argv))
    _check_combinations(args)
    prices, timeout, group_by = _pricing(args)
    export_dir = Path(args.export_dir) if args.export_dir else None
    if export_dir is not None and not export_dir.is_dir():
        raise UsageError(f"--export-dir {export_dir}: no such directory")
    connection, shown_url = _connection(args, timeout)
    output = Path(args.output) if args.output else None
    if output is not None and not output.parent.is_dir():
        raise UsageError(f"--output {output}: the directory {output.parent} does not exist")
    settings = Settings(
        prometheus=shown_url,
        by=args.by, idle_threshold_percent=args.idle_threshold, reclaim_by=args.reclaim_by,
        currency=args.currency or prices.currency or "USD", default_price=prices.default,
        model_prices=tuple(sorted(prices.per_model.items())), clusters=tuple(args.cluster), pricing_file=args.pricing)
    window = _window(args, now)
    return Options(connection, window, settings, prices, args.format, args.table, output,
                   args.top_pods, args.max_points_per_query, args.max_samples, group_by,
                   args.share_idle or "none", _previous_window(args, window, now), export_dir)


def _check_combinations(args: argparse.Namespace) -> None:
    """Numbers in range and flags that exclude or need each other, before anything is read."""
    if not 0 <= args.idle_threshold <= 100:
        raise UsageError(f"--idle-threshold {args.idle_threshold:g}: must be a percentage between 0 and 100")
    if args.top_pods < 0:
        raise UsageError(f"--top-pods {args.top_pods}: must be >= 0")
    check_connection_numbers(args)
    if args.pricing and args.price_per_gpu_hour:
        raise UsageError("give either --pricing or --price-per-gpu-hour, not both")


def check_connection_numbers(args: argparse.Namespace) -> None:
    """The numbers of ``add_connection_arguments`` in range, each mistake naming its flag."""
    if args.retries < 0:
        raise UsageError(f"--retries {args.retries}: must be >= 0")
    if args.max_points_per_query < 1:
        raise UsageError(f"--max-points-per-query {args.max_points_per_query}: must be >= 1")
    if args.max_samples < 1:
        raise UsageError(f"--max-samples {args.max_samples}: must be >= 1")


def _pricing(args: argparse.Namespace) -> tuple[PriceSheet, float, GroupBy | None]:
    """The prices, the query timeout and the chargeback grouping (None: no chargeback section)."""
    try:
        prices = load_pricing(args.pricing) if args.pricing else parse_prices(args.price_per_gpu_hour)
        timeout = flag_value("--timeout", args.timeout, parse_prometheus_duration)
        chargeback = bool(args.pricing or args.group_by or args.share_idle or args.export_dir)
        group_by = GroupBy.parse(args.group_by or args.by, args.group_fallback) if chargeback else None
    except PricingFileError as error:
        raise UsageError(f"--pricing {error}") from None
    except ValueError as error:
        raise UsageError(str(error)) from None
    return prices, timeout, group_by


def _connection(args: argparse.Namespace, timeout: float) -> tuple[Connection, str]:
    """How to reach Prometheus (secrets read from their files), and its URL as the report prints it."""
    shown_url, _ = flag_value("--prometheus", args.prometheus, split_url)  # what the report prints: no secret
    connect = secured(args, timeout_s=timeout, retries=args.retries, allow_partial=args.allow_partial,
                      user_agent="gpu-pod-exporter-report")
    return connect(args.prometheus), shown_url


def _previous_window(args: argparse.Namespace, window: Window, now: float) -> Window:
    """The window the chargeback compares with: the previous --period, else as long as this one, just before."""
    if args.period:
        previous_start = _period(args.period, now)[2]
        return Window(previous_start, previous_start + int((window.start - previous_start) // window.step)
                      * window.step, window.step)
    return Window(2 * window.start - window.end, window.start, window.step)


@dataclass(frozen=True)
class Measured:
    """The report without its chargeback, and what was needed to make it (the chargeback asks again)."""

    report: Report
    client: PrometheusClient
    queries: Queries
    clusters: frozenset[str]  # every cluster label value with allocation data, raw or recorded


def measure(opts: Options) -> Measured:
    """Ask Prometheus and compute the report's tables; PrometheusError when it cannot be asked or holds nothing."""
    client = PrometheusClient(opts.connection, max_points=opts.max_points, max_samples=opts.max_samples)
    queries = Queries(cluster_matcher(opts.settings.clusters), opts.settings.idle_threshold_percent)
    fetched = fetch(client, queries, opts.window)
    if not fetched.presence.known_clusters():
        window = f"{format_time(opts.window.start)} to {format_time(opts.window.end)}"
        raise PrometheusError(
            f"no GPU allocation data in {opts.settings.prometheus} from {window}"
            + (f" for cluster {', '.join(opts.settings.clusters)}" if opts.settings.clusters else "")
            + f": neither the exporter's {' / '.join(ALLOCATION_INPUTS)} (run it with -k / --kubernetes) nor the "
              f"recorded {FRACTION.series} ({RULE_FILE}) is there")
    report = build_report(fetched, opts.settings, opts.prices, opts.top_pods)
    return Measured(report, client, queries, fetched.presence.known_clusters())


def make_report(opts: Options) -> Report:
    """Ask Prometheus and compute the report; PrometheusError when it cannot be asked or holds nothing."""
    measured = measure(opts)
    report, client, queries = measured.report, measured.client, measured.queries
    if opts.group_by is None:
        return report
    pool_label = opts.prices.pool_label
    threshold = opts.settings.idle_threshold_percent
    current = fetch_chargeback(client, opts.window, opts.group_by, matcher=queries.matcher,
                               idle_threshold=threshold, pool_label=pool_label)
    previous = None
    if opts.previous is not None and opts.previous.points >= 1:
        previous = fetch_chargeback(client, opts.previous, opts.group_by, matcher=queries.matcher,
                                    idle_threshold=threshold, pool_label=pool_label)
    chargeback = build_chargeback(current, previous, opts.group_by, prices=opts.prices, share_idle=opts.share_idle,
                                  currency=opts.settings.currency)
    return dataclasses.replace(report, chargeback=chargeback, notes=(*report.notes, *chargeback.notes),
                               warnings=tuple(client.warnings))


def render(report: Report, opts: Options) -> str:
    if opts.output_format == "html":
        return render_html(report)
    if opts.output_format == "csv":
        return render_csv(report, opts.table)
    if opts.output_format == "json":
        return render_json(report)
    return render_text(report)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["budget-rules"]:
        from exporter.report.budgets import main as budget_rules  # noqa: PLC0415

        return budget_rules(arguments[1:])
    if arguments[:1] == ["quota"]:
        from exporter.report.quotacli import main as quota  # noqa: PLC0415

        return quota(arguments[1:])
    try:
        opts = options(arguments, time.time())
        if opts.output_format == "html":
            require_matplotlib()
        if opts.export_dir is not None:
            require_pyarrow()
    except (UsageError, MissingPlotLibraryError, MissingParquetLibraryError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = make_report(opts)
    except PrometheusError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_RUNTIME
    output = render(report, opts)
    if opts.export_dir is not None and report.chargeback is not None:
        try:
            written = export(report.chargeback, opts.export_dir)
        except OSError as error:
            print(f"{PROG}: error: --export-dir {opts.export_dir}: {error.strerror or error}", file=sys.stderr)
            return EXIT_USAGE
        for path in written:
            print(f"{PROG}: wrote {path}", file=sys.stderr)
    for warning in report.warnings:
        print(f"{PROG}: warning: Prometheus: {warning}", file=sys.stderr)
    if opts.output is None:
        sys.stdout.write(output)
        return EXIT_OK
    try:
        opts.output.write_text(output, encoding="utf-8")
    except OSError as error:
        print(f"{PROG}: error: --output {opts.output}: {error.strerror or error}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
