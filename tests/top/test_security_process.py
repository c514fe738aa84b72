"""`top --once --exporter` against the real exporter behind its own TLS and basic auth
(``--web-config-file``, the exporter's security), and `top --once --prometheus` against a real
Prometheus behind the same kind of web config (``--web.config.file``), with certificates made in
the test.

What a user sees: the right CA and credentials show the node's GPUs; a missing CA, a wrong or missing
password is one SOURCE DOWN line saying what to give; the password (from a file, the prompt or the
URL) is never on the screen.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

from exporter.prometheus.client import Connection
from exporter.top.cli import main
from exporter.top.sources import ExporterSource, PrometheusSource
from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusHarness
from tests.web.certs import CertificateAuthority

pytestmark = pytest.mark.e2e

USER, PASSWORD = "prometheus", "scrape-pa55word"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@dataclass(frozen=True)
class Secured:
    url: str
    ca_file: Path
    password_file: Path
    wrong_password_file: Path


def web_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a CA, a server certificate for 127.0.0.1, web.yml (TLS and the basic-auth user, absolute
    paths: the exporter and Prometheus read the same file) and the right and a wrong password file."""
    directory = tmp_path_factory.mktemp("top-tls")
    ca = CertificateAuthority("top test CA")
    cert, key = ca.issue("gpu-pod-exporter").write_pair(directory / "tls", "tls")
    ca.write(directory / "ca.crt")
    (directory / "web.yml").write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                                       f"basic_auth_users:\n  {USER}: {HASH}\n", encoding="utf-8")
    (directory / "password").write_text(PASSWORD + "\n", encoding="utf-8")
    (directory / "wrong").write_text("guess-7f3a9c\n", encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """The simulated exporter serving HTTPS with basic auth, as the chart's webConfig makes it."""
    directory = web_config(tmp_path_factory)
    with running_exporter(["--simulate", "default", "--web-config-file", str(directory / "web.yml")]) as process:
        secured = Secured(f"https://127.0.0.1:{process.port}", directory / "ca.crt", directory / "password",
                          directory / "wrong")
        source = ExporterSource(Connection(url=secured.url, basic_auth=(USER, PASSWORD),
                                           ca_file=str(secured.ca_file), timeout_s=5))
        wait_for(lambda: source.read().nodes, 60, "the exporter's first sample over HTTPS")
        yield secured


def top_once(*argv: str, prompt: object = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stderr", err)
        kwargs = {"prompt": prompt} if prompt is not None else {}
        code = main([*argv, "--once", "--timeout", "10s"], stdout=out, **kwargs)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def test_ca_file_and_password_file_show_the_gpus(exporter: Secured) -> None:
    code, out, err = top_once("--exporter", exporter.url, "--ca-file", str(exporter.ca_file),
                              "--basic-auth-user", USER, "--basic-auth-password-file", str(exporter.password_file))
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith("8 GPUs,"), out
    assert "SOURCE DOWN" not in out and PASSWORD not in out


def test_the_password_is_asked_for_when_there_is_no_file(exporter: Secured) -> None:
    asked: list[str] = []

    def prompt(text: str) -> str:
        asked.append(text)
        return PASSWORD

    code, out, _ = top_once("--exporter", exporter.url, "--ca-file", str(exporter.ca_file), "--basic-auth-user", USER,
                            prompt=prompt)
    assert code == 0 and asked == [f"password of {USER}: "]
    assert out.splitlines()[0].startswith("8 GPUs,") and PASSWORD not in out


def test_credentials_in_the_url_work_and_are_never_shown(exporter: Secured) -> None:
    with_password = exporter.url.replace("https://", f"https://{USER}:{PASSWORD}@")
    code, out, err = top_once("--exporter", with_password, "--insecure-skip-verify")
    assert code == 0 and out.splitlines()[0].startswith("8 GPUs,")
    wrong = exporter.url.replace("https://", f"https://{USER}:not-{PASSWORD}@")
    code, out, err = top_once("--exporter", wrong, "--ca-file", str(exporter.ca_file))
    assert code == 1
    assert out.splitlines()[1] == (f"SOURCE DOWN {exporter.url}/metrics: HTTP 401 from the exporter: check "
                                   "--bearer-token-file, --basic-auth-user/--basic-auth-password-file or --tenant")
    assert PASSWORD not in out + err


@pytest.mark.parametrize(("flags", "reason"), [
    (("--basic-auth-user", USER, "--basic-auth-password-file", "{wrong}", "--ca-file", "{ca}"), "HTTP 401"),
    (("--ca-file", "{ca}"), "HTTP 401"),
    (("--basic-auth-user", USER, "--basic-auth-password-file", "{password}"),
     "TLS error: .* \\(use --ca-file, or --insecure-skip-verify for a test server\\)"),
])
def test_a_refused_exporter_is_one_line_saying_what_to_give(exporter: Secured, flags: tuple[str, ...],
                                                            reason: str) -> None:
    paths = {"wrong": str(exporter.wrong_password_file), "ca": str(exporter.ca_file),
             "password": str(exporter.password_file)}
    code, out, _ = top_once("--exporter", exporter.url, *(flag.format(**paths) for flag in flags))
    assert code == 1
    [down] = [line for line in out.splitlines() if line.startswith("SOURCE DOWN")]
    assert re.match(f"SOURCE DOWN {re.escape(exporter.url)}/metrics: {reason}", down), down
    assert PASSWORD not in out


def test_a_prometheus_behind_tls_and_basic_auth(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Prometheus 2.42 with the same web config (exporter-toolkit's format) in front of its API, scraping a plain
    exporter: `top --prometheus` with the CA and the password file shows the node; without them, one line."""
    directory = web_config(tmp_path_factory)
    with running_exporter(["--simulate", "default"]) as process:
        prometheus = PrometheusHarness([f"127.0.0.1:{process.port}"],
                                       extra_flags=[f"--web.config.file={directory / 'web.yml'}"]).launch()
        try:
            url = f"https://127.0.0.1:{prometheus.port}"
            source = PrometheusSource(Connection(url=url, basic_auth=(USER, PASSWORD),
                                                 ca_file=str(directory / "ca.crt"), retries=0, timeout_s=5))
            wait_for(lambda: source.read().nodes, 60, "Prometheus over HTTPS to hold the exporter's GPUs")
            code, out, err = top_once("--prometheus", url, "--ca-file", str(directory / "ca.crt"), "--basic-auth-user",
                                      USER, "--basic-auth-password-file", str(directory / "password"))
            assert (code, err) == (0, "") and out.splitlines()[0].startswith("8 GPUs,"), out
            code, out, _ = top_once("--prometheus", url.replace("https://", f"https://{USER}:wrong-{PASSWORD}@"),
                                    "--ca-file", str(directory / "ca.crt"))
            assert code == 1 and PASSWORD not in out
            assert out.splitlines()[1].startswith(f"SOURCE DOWN {url}: {url}/api/v1/query_range: HTTP 401"), out
        finally:
            prometheus.stop()
