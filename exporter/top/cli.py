"""``gpu-pod-exporter top``: who is on which GPU right now, and which allocated GPUs sit idle.

Reads Prometheus (``--prometheus``: a whole cluster, or several told apart by their ``cluster``
label) or exporters directly (``--exporter``, repeatable: one node each). Interactive by default
(urwid, ``exporter.top.ui``); ``--once`` prints one screen as text and exits, for scripts.

Exit status: 0; 1 when ``--once`` could read no source; 2 for a user's mistake (a bad flag, no
terminal without ``--once``, urwid missing), with one line naming it.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from exporter import __version__
from exporter.prometheus.client import split_url
from exporter.prometheus.flags import FlagError, OneLineParser, add_security_arguments, flag_value, secured
from exporter.top.model import IDLE_BELOW_PERCENT, SORTS, Filters
from exporter.top.sources import ExporterSource, PrometheusSource, Reading, read_all
from exporter.units import parse_prometheus_duration

PROG = "gpu-pod-exporter top"
EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


# A user's mistake on the command line; the message names the flag (the shared flags raise it too).
UsageError = FlagError
USER_AGENT = f"gpu-pod-exporter-top/{__version__}"


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="GPUs and the pods on them, busiest first; allocated but "
                                "idle GPUs highlighted. Keys: ? help, q quit, tab GPUs/pods, s sort, / filter, "
                                "c clear, r refresh, arrows and page keys move.")
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
    conn = p.add_argument_group("connection (to Prometheus, or to every --exporter: its --web-config-file's TLS "
                                "and basic auth)")
    add_security_arguments(conn, password_prompt=True)
    conn.add_argument("--timeout", default="5s", metavar="DURATION", help="Per-request timeout (default 5s).")
    return p


def _ask_password(prompt: str) -> str:
    """The basic-auth password, typed without echo; only in a terminal (a script gives the file)."""
    if not sys.stdin.isatty():
        raise UsageError("--basic-auth-user without --basic-auth-password-file needs a terminal to ask the "
                         "password in")
    return getpass.getpass(prompt)


def _sources(args: argparse.Namespace, timeout_s: float,
             prompt: Callable[[str], str]) -> list[PrometheusSource | ExporterSource]:
    if bool(args.prometheus) == bool(args.exporter):
        raise UsageError("give either --prometheus URL or one or more --exporter URL")
    for flag, url in [("--prometheus", args.prometheus)] if args.prometheus else \
            [("--exporter", url) for url in args.exporter]:
        flag_value(flag, url, split_url)  # an error shows the URL redacted
    # No retries: a refresh that fails says so at once and the next one tries again.
    connect = secured(args, prompt=prompt, timeout_s=timeout_s, retries=0, user_agent=USER_AGENT)
    if args.prometheus:
        return [PrometheusSource(connect(args.prometheus))]
    return [ExporterSource(connect(url), cluster=args.exporter_cluster) for url in args.exporter]


def print_once(reading: Reading, filters: Filters, args: argparse.Namespace, out: TextIO) -> None:
    from exporter.top.model import screen  # noqa: PLC0415 - keeps the module list of --help short
    from exporter.top.table import once_text  # noqa: PLC0415 - the same lines as the terminal UI's

    out.write(once_text(reading, screen(reading.nodes, filters, args.sort, args.idle_below), args.view))


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         prompt: Callable[[str], str] = _ask_password) -> int:
    out = sys.stdout if stdout is None else stdout
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        interval_s = flag_value("--interval", args.interval, parse_prometheus_duration)
        timeout_s = flag_value("--timeout", args.timeout, parse_prometheus_duration)
        if not 0 <= args.idle_below <= 100:
            raise UsageError(f"--idle-below {args.idle_below:g}: must be a percentage between 0 and 100")  # noqa: TRY301
        sources = _sources(args, timeout_s, prompt)
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
