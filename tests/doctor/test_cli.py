"""The doctor's command line: the exporter's flags, environment and config file; its own flags; exit codes."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from exporter.cli import main as exporter_main
from exporter.config import build_parser as build_exporter_parser
from exporter.doctor.cli import build_parser as build_doctor_parser
from exporter.tools import TOOLS
from tests.doctor.support import FAST, doctor, undocumented_problems
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import REPO_ROOT
from tests.support.ports import free_port

ONE_GPU = "description: one GPU\ngpu_count: 1\ngpu_defaults: {model: L4}\n"


@pytest.fixture
def one_gpu(tmp_path: Path) -> str:
    path = tmp_path / "one.yaml"
    path.write_text(ONE_GPU, encoding="utf-8")
    return str(path)


def test_registered_as_a_subcommand(capsys: pytest.CaptureFixture[str], one_gpu: str) -> None:
    assert TOOLS["doctor"].module == "exporter.doctor.cli"
    code = exporter_main(["doctor", "--simulate", one_gpu, *FAST])
    assert code == 0
    assert capsys.readouterr().out.startswith("gpu-pod-exporter doctor: node ")


def test_exporter_flags_environment_and_config_file_are_the_exporters(
        tmp_path: Path, one_gpu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("collect-interval: 3000\nkubernetes-process-attribution: true\n", encoding="utf-8")
    monkeypatch.setenv("DCGM_EXPORTER_INTERVAL", "700")
    run = doctor("--json", "--config-file", str(config), "--simulate", one_gpu, *FAST)
    settings = run.row("config", "settings")
    assert "interval 700 ms" in settings["detail"]  # environment beats the file
    assert "process attribution on" in settings["detail"]  # from the file
    assert settings["data"]["sources"]["collect_interval_ms"] == "environment variable DCGM_EXPORTER_INTERVAL"
    flagged = doctor("--json", "--config-file", str(config), "-c", "500", "--simulate", one_gpu, *FAST)
    assert "interval 500 ms" in flagged.row("config", "settings")["detail"]  # the flag beats both


def test_doctor_flags_may_sit_anywhere(one_gpu: str) -> None:
    run = doctor("--simulate", one_gpu, "--json", "-c", "250", "--verbose", *FAST)
    assert "interval 250 ms" in run.row("config", "settings")["detail"]


def test_a_bad_exporter_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    run = doctor("--collect-interval", "soon")
    assert run.code == 2 and run.output == ""
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("gpu-pod-exporter doctor: error: flag --collect-interval")


def test_a_bad_doctor_flag_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor("--timeout", "-1").code == 2
    assert "argument --timeout" in capsys.readouterr().err


def test_at_needs_simulate() -> None:
    run = doctor("--at", "3s", "--json", *FAST)
    assert run.code == 2
    assert run.row("config", "at")["config_error"] is True


def test_a_broken_counters_file_is_a_config_error_after_the_other_checks(tmp_path: Path, one_gpu: str) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV GPU_TEMPP, gauge, typo\n", encoding="utf-8")
    run = doctor("--json", "--simulate", one_gpu, "-f", str(counters), *FAST)
    assert run.code == 2
    row = run.row("config", "counters")
    assert row["config_error"] is True and f"{counters}:2" in row["detail"]
    assert run.row("nvml", "library")["verdict"] == "ok"  # the rest still ran
    assert run.row("gpu 0", "counters")["verdict"] == "skipped"
    assert not undocumented_problems([run])


def test_a_broken_web_config_is_a_config_error(tmp_path: Path, one_gpu: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n",
                   encoding="utf-8")
    run = doctor("--json", "--simulate", one_gpu, "--web-config-file", str(web), *FAST)
    assert run.code == 2
    assert run.row("web", "config")["config_error"] is True
    assert str(web) in run.row("web", "config")["detail"]


def test_a_broken_scenario_is_a_config_error(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("gpu_count: 1\ngpu_defaults: {model: H800}\n", encoding="utf-8")
    run = doctor("--json", "--simulate", str(scenario), *FAST)
    assert run.code == 2
    assert f"{scenario}:2" in run.row("config", "simulate")["detail"]


def test_colour_only_on_a_terminal(one_gpu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "\033[32m" in doctor("--simulate", one_gpu, *FAST, tty=True).output
    assert "\033[" not in doctor("--simulate", one_gpu, *FAST).output
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\033[" not in doctor("--simulate", one_gpu, *FAST, tty=True).output


def test_verbose_lists_every_counter_row(one_gpu: str) -> None:
    short = doctor("--simulate", one_gpu, *FAST).output
    full = doctor("--simulate", one_gpu, "--verbose", *FAST).output
    assert "counter DCGM_FI_DEV_GPU_TEMP" not in short and "served" in short
    assert "counter DCGM_FI_DEV_GPU_TEMP" in full and "counter DCGM_FI_DRIVER_VERSION" in full


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    run = doctor("--help")
    assert run.code == 0
    for flag in ("--json", "--prometheus", "--timeout", "--at", "--verbose"):
        assert flag in run.output


def test_basic_auth_without_tls_is_degraded(tmp_path: Path, one_gpu: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: {bcrypt.hashpw(b'secret', bcrypt.gensalt(4)).decode()}\n",
                   encoding="utf-8")
    run = doctor("--json", "--simulate", one_gpu, "--web-config-file", str(web), *FAST)
    row = run.row("web", "config")
    assert row["verdict"] == "degraded" and "clear text" in row["hint"]
    assert not undocumented_problems([run])


@pytest.fixture
def busy_port() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "nginx/1.25"

        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_listen_address_taken_by_another_program(busy_port: int, one_gpu: str) -> None:
    run = doctor("--json", "--simulate", one_gpu, "--timeout", "2", "--address", f"127.0.0.1:{busy_port}")
    row = run.row("web", "listen")
    assert row["verdict"] == "failed" and "nginx/1.25" in row["detail"] and "--address" in row["hint"]
    assert run.code == 1
    assert not undocumented_problems([run])


@pytest.mark.e2e
def test_listen_address_taken_by_this_exporter_is_fine(one_gpu: str) -> None:
    exporter = ExporterProcess(["--simulate", one_gpu])
    try:
        exporter.wait_healthy()
        run = doctor("--json", "--simulate", one_gpu, "--timeout", "5", "--address", f"127.0.0.1:{exporter.port}")
    finally:
        exporter.stop()
    row = run.row("web", "listen")
    assert row["verdict"] == "ok" and row["data"]["server"].startswith("gpu-pod-exporter/"), row
    assert "/health 200" in row["detail"]
    assert run.code == 0


@pytest.mark.e2e
@pytest.mark.parametrize("args", [["--simulate"], []], ids=["simulated", "this-machine"])
def test_the_installed_command_never_shows_a_traceback(args: list[str]) -> None:
    """As the image test runs it: no kubelet, no API server; without --simulate, whatever this machine has."""
    environment = {key: value for key, value in os.environ.items() if key not in ("KUBECONFIG", "NODE_NAME")}
    result = subprocess.run([sys.executable, "-m", "exporter", "doctor", *args, "--timeout", "5", "--address",
                             f"127.0.0.1:{free_port()}"], cwd=REPO_ROOT, env=environment, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.startswith("gpu-pod-exporter doctor: node ")
    assert "nvml" in result.stdout and "(exit code " in result.stdout.splitlines()[-1]


def test_doctor_flags_do_not_shadow_exporter_flags() -> None:
    doctor_flags = {flag for action in build_doctor_parser()._actions for flag in action.option_strings}
    exporter_flags = {flag for action in build_exporter_parser()._actions for flag in action.option_strings}
    assert doctor_flags & exporter_flags == {"-h", "--help"}


def test_the_exporter_does_not_import_the_doctor() -> None:
    probe = ("import sys, exporter.cli, exporter.app\n"
             "exporter.cli.build_app\n"
             "print(sorted(name for name in sys.modules if name.startswith('exporter.doctor')))\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.strip() == "[]"
