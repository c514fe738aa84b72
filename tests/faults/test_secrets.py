"""A password and a token planted in every input surface never reach stderr or the log.

Where a user might put a secret, or where PyYAML used to echo one (an alias or tag name), each
surface gets one: the config file, the web config (at start and on a reload that is refused), the
counters CSV, a scenario, a kubeconfig (token, password, exec plugin arguments) and the HTTP
requests of clients (a wrong password, a bearer token). The exporter runs with ``--debug``, so
everything it logs is looked at.
"""

from __future__ import annotations

import base64
import http.client
from collections.abc import Sequence
from pathlib import Path

import bcrypt
import pytest
import yaml

from tests.faults.support import exit_of
from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

PASSWORD = "MyS3cretPassw0rd"
TOKEN = "tok3n-9f8e7d6c5b4a"
SECRETS = (PASSWORD, TOKEN)


def assert_no_secret(output: str) -> None:
    for secret in SECRETS:
        assert secret not in output, output[max(0, output.find(secret) - 300):output.find(secret) + 100]


def refused(args: Sequence[str]) -> str:
    code, output = exit_of(args)
    assert code == 2, output
    assert_no_secret(output)
    return output


@pytest.mark.parametrize("text", [
    f"kubeconfig: *{PASSWORD}\n",
    f"log-format: !{PASSWORD} json\n",
    f"log-format: !!python/name:{PASSWORD} json\n",
    f"log-format: \"\\{PASSWORD}\"\n",
    f"kubeconfig: [{PASSWORD}, {TOKEN}]\n",
])
def test_config_file(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.yaml").write_text(text)
    refused(["--simulate", "--config-file", str(tmp_path / "config.yaml")])


@pytest.mark.parametrize("text", [
    f"basic_auth_users:\n  prometheus: *{PASSWORD}\n",
    f"basic_auth_users:\n  prometheus: !{PASSWORD} x\n",
    f"basic_auth_users:\n  prometheus: {PASSWORD}\n",  # a plain password where the bcrypt hash belongs
    f"basic_auth_users:\n  prometheus: [{PASSWORD}]\n",
    f"tls_server_config:\n  cert_file: /nonexistent\n  key: {TOKEN}\n",
])
def test_web_config_at_start(tmp_path: Path, text: str) -> None:
    (tmp_path / "web.yml").write_text(text)
    refused(["--simulate", "--web-config-file", str(tmp_path / "web.yml")])


def test_counters_csv_and_scenario(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text(f'DCGM_FI_DEV_GPU_TEMP, gauge, "{PASSWORD}\nDCGM_NOT_A_FIELD, gauge, {TOKEN}\n')
    refused(["--simulate", "-f", str(tmp_path / "c.csv")])
    (tmp_path / "s.yaml").write_text(f"description: *{PASSWORD}\n")
    refused(["--simulate", str(tmp_path / "s.yaml")])
    (tmp_path / "s.yaml").write_text(f"gpu_count: 1\ndescription: !{TOKEN} x\n")
    refused(["--simulate", str(tmp_path / "s.yaml")])


def get(port: int, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_a_running_exporter_logs_no_secret_from_clients_reloads_or_the_kubeconfig(tmp_path: Path) -> None:
    good = "scrape-" + "x" * 8
    hashed = bcrypt.hashpw(good.encode(), bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"exec": {"command": "/bin/echo", "args": [PASSWORD, TOKEN],
                                                  "apiVersion": "client.authentication.k8s.io/v1"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    with running_exporter(["--simulate", "--debug", "--web-config-file", str(web),
                           "--kubeconfig", str(kubeconfig)]) as exporter:
        authorization = "Basic " + base64.b64encode(f"prometheus:{good}".encode()).decode()
        def answered() -> bool:
            exporter.assert_running()
            try:
                return get(exporter.port, {"Authorization": authorization}) == 200
            except OSError:
                return False

        wait_for(answered, 30, "an authenticated answer")
        for headers in ({"Authorization": "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()},
                        {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Basic {TOKEN}"},
                        {"Authorization": "Basic " + base64.b64encode(f"{TOKEN}:{PASSWORD}".encode()).decode()}):
            assert get(exporter.port, headers) == 401
        for text in (f"basic_auth_users:\n  prometheus: *{PASSWORD}\n",
                     f"basic_auth_users:\n  prometheus: !{TOKEN} x\n",
                     f"basic_auth_users:\n  prometheus: {PASSWORD}\n"):
            refusals = exporter.log().count("web config change not applied")
            reloads = exporter.log().count("web config reloaded")
            web.write_text(text)
            wait_for(lambda n=refusals: exporter.log().count("web config change not applied") > n or None, 20,
                     "the refused reload to be logged")
            web.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
            wait_for(lambda n=reloads: exporter.log().count("web config reloaded") > n or None, 20,
                     "the good config to be loaded again")
        assert get(exporter.port, {"Authorization": authorization}) == 200
        assert "--kubeconfig-allow-exec" in exporter.log()  # the plugin was refused, and said so
        assert_no_secret(exporter.log())
