"""``gpu-pod-exporter top``: who is on which GPU right now, and which allocated GPUs sit idle.

Reads Prometheus (``--prometheus``: a whole cluster, or several told apart by their ``cluster``
label) or exporters directly (``--exporter``, repeatable: one node each). Interactive by default
(urwid, ``exporter.top.ui``); ``--once`` prints one screen as text and exits, for scripts.

Exit status: 0; 1 when ``--once`` could read no source; 2 for a user's mistake (a bad flag, no
terminal without ``--once``, urwid missing), with one line naming it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from exporter.report.promclient import Connection, split_url
from exporter.top.model import IDLE_BELOW_PERCENT, SORTS, Filters
from exporter.top.sources import ExporterSource, PrometheusSource, Reading, read_all
from exporter.units import parse_prometheus_duration

PROG = "gpu-pod-exporter top"
EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


class UsageError(ValueError):
    """A user's mistake on the command line; the message names the flag."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="GPUs and the pods on them, busiest first; allocated but "
                                "idle GPUs highlighted. Keys: q quit, tab GPUs/pods, s sort, / filter, c clear, "
                                "r refresh, arrows and page keys move.")
    src = p.add_argument_group("source (one of)")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus, Thanos Query or Mimir API base URL.")
    src.add_argument("--exporter", action="append", default=[], metavar="URL",
                     help="An exporter's base or /metrics URL (repeatable; one node each).")
    src.add_argument("--exporter-cluster", default="", metavar="NAME",
                     help="Cluster name shown for --exporter sources (they carry no cluster label).")
    flt = p.add_argument_group("filters (also editable with / while running)")
    for key in ("cluster", "node", "namespace", "team"):
        flt.add_argument(f"--{key}", default="", metavar="NAME", help=f"Only this {key}.")
    view = p.add_argument_group("view")
    view.add_argument("--view", choices=("gpus", "pods"), default="gpus", help="What to list first (default gpus).")
    view.add_argument("--sort", choices=SORTS, default="use", help="Order (default use: busiest first).")
    view.add_argument("--idle-below", type=float, default=IDLE_BELOW_PERCENT, metavar="PERCENT",
                      help=f"Allocated and used less than this is idle (default {IDLE_BELOW_PERCENT:g}).")
    view.add_argument("--interval", default="2s", metavar="DURATION", help="Refresh period (default 2s).")
    view.add_argument("--once", action="store_true", help="Print one screen as text and exit.")
    conn = p.add_argument_group("connection")
    conn.add_argument("--tenant", metavar="ID", help="Tenant for Mimir/Cortex/Thanos (X-Scope-OrgID header).")
    conn.add_argument("--ca-file", metavar="FILE", help="CA certificates to verify the server with.")
    conn.add_argument("--insecure-skip-verify", action="store_true", help="Do not verify the server's certificate.")
    conn.add_argument("--timeout", default="5s", metavar="DURATION", help="Per-request timeout (default 5s).")
    return p


def _sources(args: argparse.Namespace, timeout_s: float) -> list[PrometheusSource | ExporterSource]:
    if bool(args.prometheus) == bool(args.exporter):
        raise UsageError("give either --prometheus URL or one or more --exporter URL")
    if args.prometheus:
        try:
            split_url(args.prometheus)
        except ValueError as error:
            raise UsageError(f"--prometheus: {error}") from None
        # No retries: a refresh that fails says so at once and the next one tries again.
        connection = Connection(url=args.prometheus, tenant=args.tenant, ca_file=args.ca_file,
                                insecure_skip_verify=args.insecure_skip_verify, timeout_s=timeout_s, retries=0)
        return [PrometheusSource(connection)]
    for url in args.exporter:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--exporter {url!r}: expected http(s)://host:port[/metrics]")
    return [ExporterSource(url, cluster=args.exporter_cluster, timeout_s=timeout_s) for url in args.exporter]


def print_once(reading: Reading, filters: Filters, args: argparse.Namespace, out: TextIO) -> None:
    from exporter.top.model import screen  # noqa: PLC0415 - keeps the module list of --help short
    from exporter.top.table import once_text  # noqa: PLC0415 - the same lines as the terminal UI's

    out.write(once_text(reading, screen(reading.nodes, filters, args.sort, args.idle_below), args.view))


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        try:
            interval_s, timeout_s = parse_prometheus_duration(args.interval), parse_prometheus_duration(args.timeout)
        except ValueError as error:
            raise UsageError(str(error)) from None
        if interval_s <= 0 or not 0 <= args.idle_below <= 100:
            raise UsageError("--interval must be positive and --idle-below a percentage between 0 and 100")  # noqa: TRY301
        sources = _sources(args, timeout_s)
        filters = Filters({key: getattr(args, key) for key in ("cluster", "node", "namespace", "team")
                           if getattr(args, key)})
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE

    def read(current: Filters) -> Reading:
        return read_all(sources, current.values.get("cluster", ""), current.values.get("node", ""))

    if args.once:
        reading = read(filters)
        print_once(reading, filters, args, out)
        return EXIT_RUNTIME if reading.errors and not reading.nodes else EXIT_OK
    if not (sys.stdin.isatty() and out.isatty()):
        print(f"{PROG}: error: the interactive view needs a terminal; use --once for text", file=sys.stderr)
        return EXIT_USAGE
    try:
        from exporter.top.ui import TopApp  # noqa: PLC0415 - urwid is the optional `top` extra
    except ImportError:
        print(f"{PROG}: error: the interactive view needs urwid: pip install 'gpu-pod-exporter[top]'",
              file=sys.stderr)
        return EXIT_USAGE

    TopApp(read, filters, interval_s=interval_s, sort=args.sort, idle_below=args.idle_below, view=args.view).run()
    return EXIT_OK
