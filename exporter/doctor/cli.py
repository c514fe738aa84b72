"""``gpu-pod-exporter doctor [doctor flags] [exporter flags]``: check the node, print rows, exit 0/1/2.

The doctor's own flags are taken out first; everything else is the exporter's command line, read
by the exporter's ``load_config`` together with its environment variables and ``--config-file``,
so inside the DaemonSet ``kubectl exec ... -- gpu-pod-exporter doctor`` checks exactly the
settings the running exporter uses. Inputs the exporter would refuse at start-up (counters CSV,
web config, scenario) become failed rows marked as configuration errors (exit code 2), after the
other checks ran; a bad flag, variable or config-file key is one line on stderr and exit code 2,
as for the exporter.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO

from exporter.config import PROGRAM, Config, ConfigError, load_config
from exporter.doctor.api_checks import check_api
from exporter.doctor.kubelet_checks import check_kubelet
from exporter.doctor.nvml_checks import check_nvml
from exporter.doctor.process_checks import check_processes
from exporter.doctor.prometheus_checks import check_prometheus
from exporter.doctor.report import EXIT_CONFIG_ERROR, Report, Row, config_error, degraded, ok
from exporter.doctor.table import render_table
from exporter.doctor.web_checks import check_web
from exporter.logs import LOGGER_NAME, configure
from exporter.metrics.counters import CounterFileError, CounterSet, load_counters
from exporter.units import parse_quantity_duration
from exporter.web.security import load_web_security
from exporter.web.server import WebSecurity

if TYPE_CHECKING:
    from exporter.simulation import DoctorInspection

NAME = f"{PROGRAM} doctor"
DEFAULT_TIMEOUT_S = 10.0
COUNTERS_HINT = "fix the counters CSV (dcgm-exporter's format: name, type, help) named in the message"
WEB_CONFIG_HINT = "fix the web config file (Prometheus exporter-toolkit format) at the file, line and key shown"
SCENARIO_HINT = "fix the scenario file at the line and key shown, or use a built-in scenario name"
SKIPPED_ROWS_HINT = ("these rows cannot be served through NVML: remove them from the counters CSV or accept their "
                     "absence")


class _DoctorArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError("command line", "doctor", message)


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _DoctorArgumentParser(
        prog=NAME, add_help=False, allow_abbrev=False,
        description="Check what the exporter on this node needs (NVML and each GPU, the kubelet, the Kubernetes "
        "API, process attribution, the listener, optionally Prometheus) and say how to fix what does not work. "
        f"Every exporter flag, environment variable and --config-file is accepted too ({PROGRAM} --help).",
        epilog="Exit codes: 0 every row ok (or skipped), 1 something degraded or failed, 2 a configuration error.")
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (every row, with data)")
    parser.add_argument("--verbose", action="store_true", help="list every counter row in the table")
    parser.add_argument("--prometheus", metavar="URL", default="",
                        help="also check the Prometheus at URL: this node's target, honorLabels, the shipped rules "
                        "and the counters they need")
    parser.add_argument("--timeout", metavar="SECONDS", type=_positive_seconds, default=DEFAULT_TIMEOUT_S,
                        help=f"deadline of each probe (NVML cycle, kubelet, API, Prometheus; default "
                        f"{DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--at", metavar="DURATION", type=parse_quantity_duration, default=None,
                        help="with --simulate: the scenario time to inspect (default: just after the last "
                        "scheduled fault)")
    return parser


@contextlib.contextmanager
def _exporter_logs(config: Config) -> Iterator[None]:
    """The exporter's components log as they work; the doctor's report says it better, so they are
    silent unless --debug (then they go to stderr in the configured format)."""
    logger = logging.getLogger(LOGGER_NAME)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    if config.debug:
        configure(config.log_format, True)
    else:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(logging.NullHandler())
        logger.setLevel(logging.CRITICAL)
        logger.propagate = False
    try:
        yield
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        # A probe thread abandoned at its deadline may still log when its call returns: never to
        # Python's last-resort stderr handler.
        for handler in saved[0] or [logging.NullHandler()]:
            logger.addHandler(handler)
        logger.setLevel(saved[1])
        logger.propagate = saved[2]


def _settings_row(config: Config) -> Row:
    parts = [f"config file {config.config_file}" if config.config_file else "no config file",
             f"listen {config.address}", f"interval {config.collect_interval_ms} ms",
             "Kubernetes on" if config.kubernetes else "Kubernetes off",
             "process attribution on" if config.process_attribution else "process attribution off"]
    return ok("config", "settings", ", ".join(parts), sources=dict(config.sources))


def _counters_rows(config: Config) -> tuple[list[Row], CounterSet | None]:
    try:
        counters = load_counters(config.collectors)
    except CounterFileError as exc:
        return [config_error("config", "counters", f"{config.source_of('collectors')}: {exc}", COUNTERS_HINT)], None
    labels = len(counters.labels)
    text = f"{counters.source}: {len(counters.metrics)} metric rows, {labels} label row{'s' if labels != 1 else ''}"
    if counters.warnings:
        return [degraded("config", "counters", f"{text}; {len(counters.warnings)} skipped: "
                         f"{'; '.join(counters.warnings)}", SKIPPED_ROWS_HINT)], counters
    return [ok("config", "counters", text)], counters


def diagnose(options: argparse.Namespace, config: Config) -> Report:
    rows: list[Row] = []
    counter_rows, counters = _counters_rows(config)
    rows.extend(counter_rows)
    security: WebSecurity | None = None
    try:
        security = load_web_security(config.web_config_file)
    except ConfigError as exc:
        rows.append(config_error("web", "config", str(exc), WEB_CONFIG_HINT))
    simulation: DoctorInspection | None = None
    simulated = ""
    if config.simulate:
        from simulator import entry  # noqa: PLC0415 - the simulator's one door, only with --simulate

        try:
            simulation = entry.doctor_inspection(config, options.at)
        except ConfigError as exc:
            rows.append(config_error("config", "simulate", f"{config.source_of('simulate')}: {exc}", SCENARIO_HINT))
            return Report.of(rows, node=config.node_name or socket.gethostname())
        config = simulation.config
        simulated = simulation.title
    elif options.at is not None:
        rows.append(config_error("config", "at", "--at only applies with --simulate", "drop --at, or add --simulate"))
    rows.insert(0, _settings_row(config))
    timeout = options.timeout
    with simulation if simulation is not None else contextlib.nullcontext():
        findings = check_nvml(config, counters, timeout)
        rows.extend(findings.rows)
        rows.extend(check_kubelet(config, findings, timeout))
        rows.extend(check_api(config, timeout))
        rows.extend(check_processes(config, findings.processes, findings.nvml_up))
        rows.extend(check_web(config, security, timeout))
        if options.prometheus:
            rows.extend(check_prometheus(options.prometheus, config, counters, findings.rows, timeout))
    return Report.of(rows, node=config.node_name or socket.gethostname(), simulated=simulated)


def main(argv: Sequence[str], stdout: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    parser = build_parser()
    try:
        options, rest = parser.parse_known_args(list(argv))
        if options.help:
            parser.print_help(out)
            return 0
        config = load_config(rest)
    except ConfigError as exc:
        print(f"{NAME}: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    with _exporter_logs(config):
        report = diagnose(options, config)
    if options.json:
        out.write(report.to_json() + "\n")
    else:
        render_table(report, out, verbose=options.verbose)
    out.flush()
    return report.exit_code
