"""The ``report`` subcommand's command line: windows, mistakes (exit 2), failures (exit 1), isolation."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.report.cli import main, options
from exporter.report.quotacli import options as quota_options
from tests.prometheus.test_client import Answer, Request, matrix, server
from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
NOW = 1_750_000_123.0


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_default_window_is_seven_days_ending_at_now_rounded_to_the_step() -> None:
    window = options(["--prometheus", "http://p:9090"], NOW).window
    assert window.end == 1_750_000_080.0 and window.end - window.start == 7 * 86400 and window.step == 60


@pytest.mark.parametrize(("argv", "start", "end", "step"), [
    (["--range", "30d", "--end", "2025-07-01"], 1748736000, 1751328000, 60),
    (["--start", "2025-06-01", "--end", "2025-07-01T00:00:00Z", "--step", "5m"], 1748736000, 1751328000, 300),
    (["--start", "2025-06-01T00:00:00+02:00", "--range", "1h30m"], 1748728800, 1748734200, 60),
    (["--start", "1748736000", "--end", "1748736150", "--step", "1m"], 1748736000, 1748736120, 60),  # whole steps
])
def test_explicit_windows(argv: list[str], start: float, end: float, step: float) -> None:
    window = options(["--prometheus", "http://p", *argv], NOW).window
    assert (window.start, window.end, window.step) == (start, end, step)


# Every flag of `report` that takes a value a user can get wrong: each mistake names its flag.
@pytest.mark.parametrize(("argv", "message"), [
    (["--step", "0s"], "--step: invalid duration '0s': must be longer than zero"),
    (["--step", "1 minute"], "--step: invalid duration '1 minute'"),
    (["--range", "0s"], "--range: invalid duration '0s': must be longer than zero"),
    (["--range", "a week"], "--range: invalid duration 'a week'"),
    (["--start", "June"], "--start: invalid time 'June'"),
    (["--start", "2025-06-01T00:00:00"], "--start: invalid time .*give a time zone"),
    (["--end", "-5"], "--end: invalid time '-5'"),
    (["--period", "2025-13"], "--period '2025-13': expected YYYY-MM"),
    (["--period", "2025-06", "--range", "1d"], "--period with --start, --end or --range"),
    (["--range", "1d", "--start", "2025-06-01", "--end", "2025-06-02"], "--range with both --start and --end"),
    (["--start", "2025-06-02", "--end", "2025-06-01"], "the window is empty: --end .* is not after --start"),
    (["--start", "2025-06-01", "--end", "2025-06-01T00:00:30Z"], "--step 1m: longer than the window"),
    (["--idle-threshold", "150"], "--idle-threshold 150: must be a percentage between 0 and 100"),
    (["--top-pods", "-1"], "--top-pods -1: must be >= 0"),
    (["--retries", "-1"], "--retries -1: must be >= 0"),
    (["--max-points-per-query", "0"], "--max-points-per-query 0: must be >= 1"),
    (["--max-samples", "0"], "--max-samples 0: must be >= 1"),
    (["--basic-auth-user", "alice"], "--basic-auth-user and --basic-auth-password-file go together"),
    (["--basic-auth-password-file", "/etc/hostname"], "--basic-auth-password-file needs --basic-auth-user"),
    (["--bearer-token-file", "/nonexistent/token"], "--bearer-token-file /nonexistent/token: No such file"),
    (["--header", "no colon"], "--header 'no colon': expected 'Name: value'"),
    (["--price-per-gpu-hour", "cheap"], "--price-per-gpu-hour 'cheap': 'cheap' is not a number"),
    (["--pricing", "/nonexistent/pricing.yaml"], "--pricing /nonexistent/pricing.yaml"),
    (["--group-by", "colour"], "--group-by 'colour': expected team, namespace"),
    (["--output", "/nonexistent/dir/report.txt"], "--output /nonexistent/dir/report.txt: the directory"),
    (["--export-dir", "/nonexistent/dir"], "--export-dir /nonexistent/dir: no such directory"),
    (["--timeout", "soon"], "--timeout: invalid duration 'soon'"),
    (["--timeout", "0s"], "--timeout: invalid duration '0s'"),
    (["--ca-file", "/nonexistent/ca.pem"], "--ca-file /nonexistent/ca.pem: no such file"),
    (["--ca-file", "/etc/hostname", "--insecure-skip-verify"], "either --ca-file or --insecure-skip-verify"),
    (["--top-pods", "many"], "--top-pods: invalid int value: 'many'"),
    (["--idle-threshold", "low"], "--idle-threshold: invalid float value: 'low'"),
    (["--format", "pdf"], "--format: invalid choice: 'pdf'"),
    (["--by", "pod"], "--by: invalid choice: 'pod'"),
    (["--table", "x"], "--table: invalid choice: 'x'"),
    (["--share-idle", "x"], "--share-idle: invalid choice: 'x'"),
    (["--group-fallback", "x"], "--group-fallback: invalid choice: 'x'"),
    (["--reclaim-by", "x"], "--reclaim-by: invalid choice: 'x'"),
    (["--retries", "x"], "--retries: invalid int value: 'x'"),
    (["--max-samples", "x"], "--max-samples: invalid int value: 'x'"),
    (["--max-points-per-query", "x"], "--max-points-per-query: invalid int value: 'x'"),
    (["--colour"], "unrecognized arguments: --colour"),
])
def test_mistakes_are_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["--prometheus", f"http://127.0.0.1:{free_port()}", *argv], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("gpu-pod-exporter report: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert re.search(message, err), err


def test_a_bad_url_is_a_mistake(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["--prometheus", "prometheus:9090"], capsys)
    assert code == 2 and "--prometheus: invalid URL 'prometheus:9090'" in err


def test_html_without_matplotlib_says_how_to_install_it_before_asking_prometheus(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with server(lambda r: Answer(500, {})) as (url, requests):
        code, out, err = run(["--prometheus", url, "--format", "html"], capsys)
    assert code == 2 and out == ""
    assert "pip install 'gpu-pod-exporter[report]'" in err
    assert requests == []


def test_an_unreachable_prometheus_exits_1_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code, out, err = run(["--prometheus", f"http://127.0.0.1:{port}", "--retries", "0"], capsys)
    assert code == 1 and out == ""
    assert err.startswith(f"gpu-pod-exporter report: error: cannot reach http://127.0.0.1:{port}")


def test_a_prometheus_without_gpu_data_exits_1_saying_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    def script(request: Request) -> Answer:
        if "/label/" in request.path:
            return Answer(200, {"status": "success", "data": []})
        return matrix(request, series=0)

    with server(script) as (url, _):
        code, _, err = run(["--prometheus", url, "--range", "1h", "--cluster", "east"], capsys)
    assert code == 1
    assert "no GPU allocation data in" in err and "for cluster east" in err
    assert "DCGM_EXP_GPU_ALLOCATION_INFO / DCGM_EXP_GPU_ALLOCATED (run it with -k / --kubernetes)" in err
    assert "namespace_team_model:gpu_fraction:sum" in err


def test_the_report_never_prints_the_credentials_of_the_url(capsys: pytest.CaptureFixture[str]) -> None:
    opts = options(["--prometheus", "https://alice:secret@prom.example/prometheus"], NOW)
    assert opts.settings.prometheus == "https://prom.example/prometheus"


def test_the_subcommand_runs_from_the_exporter_entry_point() -> None:
    result = subprocess.run([sys.executable, "-m", "exporter", "report", "--help"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "usage: gpu-pod-exporter report" in result.stdout and "--price-per-gpu-hour" in result.stdout


def test_the_exporter_imports_nothing_of_the_report_and_the_report_no_matplotlib_until_html() -> None:
    code = ("import sys, exporter.cli, exporter.app\n"
            "print(sorted(m for m in sys.modules if m.startswith(('exporter.report', 'matplotlib', 'pyarrow'))))\n"
            "import exporter.report.cli, exporter.report.text\n"
            "print(sorted(m for m in sys.modules if m.startswith(('matplotlib', 'pyarrow'))))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "[]"]


def test_the_readme_s_report_command_is_a_valid_command_line() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    [line, chargeback, quota] = [line for line in readme.splitlines() if line.startswith("gpu-pod-exporter report ")]
    argv = line.split("#", 1)[0].split()[2:]
    opts = options(argv, NOW)
    assert opts.settings.prometheus == "http://prometheus:9090"
    assert opts.window.end - opts.window.start == 7 * 86400
    assert "[`docs/cost.md`](docs/cost.md)" in readme
    # the chargeback line (run from the repository root, where its example pricing file is)
    monthly = options([str(REPO_ROOT / arg) if arg.startswith("etc/") else arg
                       for arg in chargeback.split("#", 1)[0].split()[2:]], NOW)
    assert monthly.group_by is not None and str(monthly.group_by) == "label:cost-center"
    assert monthly.settings.pricing_file is not None
    assert monthly.previous is not None and monthly.previous.end == monthly.window.start
    # the quota plan (issue 43): a valid `report quota` command line writing the YAML patches
    assert quota.startswith("gpu-pod-exporter report quota ")
    plan = quota_options(quota.split("#", 1)[0].split()[3:], NOW)
    assert plan.output == "yaml" and not plan.apply
    assert plan.report.window.end - plan.report.window.start == 7 * 86400
