"""`gpu-pod-exporter top` on the command line: mistakes are one line and exit 2; --once prints a screen."""

from __future__ import annotations

import io

import pytest

from exporter.cli import main as exporter_main
from exporter.top.cli import main
from tests.support.ports import free_port
from tests.support.prometheus import serve_metrics

METRICS = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"} 0\n'
           'DCGM_EXP_GPU_ALLOCATION_INFO{gpu="0",UUID="GPU-1",Hostname="node-a",namespace="ml",pod="p-0",'
           'container="c"} 1\n')


# Every flag of `top` that takes a value a user can get wrong: each mistake names its flag.
@pytest.mark.parametrize(("argv", "message"), [
    ([], "give either --prometheus URL or one or more --exporter URL"),
    (["--prometheus", "http://p:9090", "--exporter", "http://e:9400"], "give either --prometheus"),
    (["--prometheus", "p:9090"], "--prometheus: invalid URL 'p:9090'"),
    (["--exporter", "e:9400"], "--exporter: invalid URL 'e:9400'"),
    (["--exporter", "ftp://scraper:hunter2@e:9400"], "--exporter: invalid URL 'ftp://scraper:***@e:9400'"),
    (["--exporter", "http://e:9400", "--interval", "soon"], "--interval: invalid duration 'soon'"),
    (["--exporter", "http://e:9400", "--interval", "0s"], "--interval: invalid duration '0s'"),
    (["--exporter", "http://e:9400", "--timeout", "0s"], "--timeout: invalid duration '0s'"),
    (["--exporter", "http://e:9400", "--idle-below", "150"], "--idle-below 150: must be a percentage"),
    (["--exporter", "http://e:9400", "--ca-file", "/nonexistent/ca.pem"], "--ca-file /nonexistent/ca.pem: no such"),
    (["--exporter", "http://e:9400", "--ca-file", "/etc/hostname", "--insecure-skip-verify"],
     "either --ca-file or --insecure-skip-verify"),
    (["--exporter", "http://e:9400", "--basic-auth-password-file", "/etc/hostname"],
     "--basic-auth-password-file needs --basic-auth-user"),
    (["--exporter", "http://e:9400", "--basic-auth-user", "a", "--basic-auth-password-file", "/nonexistent/pw"],
     "--basic-auth-password-file /nonexistent/pw: No such file"),
    (["--exporter", "http://e:9400", "--bearer-token-file", "/nonexistent/token"],
     "--bearer-token-file /nonexistent/token: No such file"),
    (["--exporter", "http://e:9400", "--bearer-token-file", "/etc/hostname", "--basic-auth-user", "a"],
     "either --bearer-token-file or basic auth"),
    (["--exporter", "http://e:9400", "--header", "nonsense"], "--header 'nonsense': expected 'Name: value'"),
    (["--exporter", "http://e:9400", "--idle-below", "x"], "--idle-below: invalid float value: 'x'"),
    (["--exporter", "http://e:9400", "--view", "x"], "--view: invalid choice: 'x'"),
    (["--exporter", "http://e:9400", "--sort", "x"], "--sort: invalid choice: 'x'"),
    (["--exporter", "http://e:9400", "--colour"], "unrecognized arguments: --colour"),
])
def test_a_mistake_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv, prompt=refuse_prompt) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-pod-exporter top: error: ") and message in err and err.count("\n") == 1, err
    assert "hunter2" not in err


def refuse_prompt(text: str) -> str:
    raise AssertionError(f"asked for a password: {text}")


def test_without_a_password_file_or_a_terminal_top_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--exporter", "http://e:9400", "--basic-auth-user", "a", "--once"]) == 2  # stdin is no tty here
    assert "--basic-auth-user without --basic-auth-password-file needs a terminal" in capsys.readouterr().err


def test_once_prints_the_screen_and_the_interactive_view_needs_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with serve_metrics(METRICS.encode) as target:
        out = io.StringIO()
        assert main(["--exporter", f"http://{target}", "--once"], stdout=out) == 0
        lines = out.getvalue().splitlines()
        assert lines[0] == "1 GPUs, 1 allocated, 1 allocated but idle, 0 unhealthy; 1 pod containers"
        assert "ALLOCATED IDLE " in lines[2] and lines[2].endswith(" ml/p-0") and lines[2].startswith("node-a")
        assert exporter_main(["top", "--exporter", f"http://{target}"]) == 2  # the subcommand; stdin is no tty
        assert "needs a terminal; use --once" in capsys.readouterr().err


def test_once_with_every_source_down_exits_1_with_the_reason() -> None:
    out = io.StringIO()
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--exporter", url, "--once", "--timeout", "2s"], stdout=out) == 1
    assert out.getvalue().splitlines()[1].startswith(f"SOURCE DOWN {url}/metrics: cannot reach the exporter")


def test_help_names_the_help_key(capsys: pytest.CaptureFixture[str]) -> None:
    """``top --help`` lists the keys, the one that shows them all (``?``) included."""
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Keys: ? help, q quit" in text
