"""Bad user input at start-up, against the real process: exit code 2 and one line naming file, line, key.

The operator's view: ``kubectl logs`` of a crash-looping pod shows exactly one line that says
which file, which line and which key to fix, and never a Python traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import EXIT_CONFIG_ERROR
from tests.faults.support import exit_of

pytestmark = pytest.mark.e2e


def assert_one_clear_line(output: str, *expected: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{output}"
    line = lines[0]
    assert line.startswith("gpu-pod-exporter: error: "), line
    for part in expected:
        assert part in line, f"{part!r} not in {line!r}"
    assert "Traceback" not in output
    return line


def test_malformed_counters_csv(tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text("# my counters\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
                   "DCGM_FI_DEV_POWER_USAGE, gauge\n")
    code, output = exit_of(["--simulate", "default", "--collectors", str(csv)])
    assert code == EXIT_CONFIG_ERROR
    assert_one_clear_line(output, f"{csv}:3", "DCGM_FI_DEV_POWER_USAGE", "expected 3 columns")


@pytest.mark.parametrize("name", ["DCGM_FI_DEV GPU_TEMP", "gpu_temperature"])
def test_counters_csv_row_that_is_no_dcgm_name_at_all(tmp_path: Path, name: str) -> None:
    """Not a newer DCGM field (those are skipped with a warning): a row no DCGM release could have."""
    csv = tmp_path / "counters.csv"
    csv.write_text(f"DCGM_FI_DEV_SM_CLOCK, gauge, SM clock.\n{name}, gauge, GPU temperature (in C).\n")
    code, output = exit_of(["--simulate", "default", "-f", str(csv)])
    assert code == EXIT_CONFIG_ERROR
    assert_one_clear_line(output, f"{csv}:2", name, "not a DCGM field name")


def test_counters_csv_with_an_unknown_metric_type(tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_SM_CLOCK, gaug, SM clock.\n")
    code, output = exit_of(["--simulate", "default", "-f", str(csv)])
    assert code == EXIT_CONFIG_ERROR
    assert_one_clear_line(output, f"{csv}:2", "gaug")


@pytest.mark.parametrize(("text", "expected"), [
    ("collect-interval: 1000\naddress: [\n", ("config.yaml:3", "yaml", "not valid YAML")),
    ("collect-interval: 1000\nadress: ':9400'\n", ("config.yaml:2", "adress", "unknown key")),
    ("collect-interval: 10\n", ("config.yaml:1", "collect-interval", "must be at least 100 milliseconds")),
], ids=["syntax", "unknown-key", "bad-value"])
def test_malformed_yaml_config(tmp_path: Path, text: str, expected: tuple[str, ...]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    code, output = exit_of(["--simulate", "default", "--config-file", str(config)])
    assert code == EXIT_CONFIG_ERROR
    assert_one_clear_line(output, *expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("tls_server_config:\n  cert_file: tls.crt\n   key_file: tls.key\n", ("web.yml:3", "yaml", "not valid YAML")),
    ("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  min_verison: TLS12\n",
     ("web.yml:4", "tls_server_config.min_verison", "unknown key")),
    ("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  min_version: TLS14\n",
     ("web.yml:4", "tls_server_config.min_version", "expected one of TLS10, TLS11, TLS12, TLS13")),
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: tls.key\n",
     ("web.yml:2", "tls_server_config.cert_file", "cannot read", "missing.crt", "No such file")),
    ("http_server_config:\n  headers:\n    Access-Control-Allow-Origin: '*'\n",
     ("web.yml:3", "http_server_config.headers.Access-Control-Allow-Origin", "is not allowed")),
    ("basic_auth_users:\n  prometheus: plain-text-password\n",
     ("web.yml:2", "basic_auth_users.prometheus", "not a bcrypt hash")),
], ids=["syntax", "unknown-key", "bad-version", "missing-cert-file", "header-not-allowed", "plain-password"])
def test_malformed_web_config(tmp_path: Path, text: str, expected: tuple[str, ...]) -> None:
    web = tmp_path / "web.yml"
    web.write_text(text)
    code, output = exit_of(["--simulate", "default", "--web-config-file", str(web)])
    assert code == EXIT_CONFIG_ERROR
    line = assert_one_clear_line(output, str(web), *expected)
    assert "plain-text-password" not in line


def test_a_missing_web_config_file_is_named_from_the_environment(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yml"
    code, output = exit_of(["--simulate", "default"], env={"DCGM_EXPORTER_WEB_CONFIG_FILE": str(missing)})
    assert code == EXIT_CONFIG_ERROR
    assert_one_clear_line(output, str(missing), "cannot read", "No such file")
