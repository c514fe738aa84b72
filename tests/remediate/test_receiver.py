"""The webhook listener: who may post, what is refused before any work, TLS from the same web config file."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import bcrypt
import pytest

from exporter.remediate.alerts import Notification
from exporter.remediate.receiver import MAX_BODY_BYTES, WebhookReceiver, parse_listen_address
from exporter.remediate.selfmetrics import RemediationMetrics
from exporter.web import server as server_module
from exporter.web.security import load_web_security
from exporter.web.server import Decision, WebSecurity
from tests.support.polling import wait_for
from tests.web.certs import CertificateAuthority
from tests.web.test_server_deadlines import closed_by_server

PAYLOAD = {"version": "4", "status": "firing", "receiver": "r", "groupKey": "g", "truncatedAlerts": 0,
           "alerts": [{"status": "firing", "labels": {"alertname": "GpuXidFatal", "Hostname": "n", "UUID": "GPU-1"},
                       "startsAt": "2024-05-01T10:00:00Z", "fingerprint": "f"}]}


class StubRemediator:
    def __init__(self) -> None:
        self.received: list[Notification] = []

    def receive(self, notification: Notification) -> dict[str, int]:
        self.received.append(notification)
        return {"new": len(notification.alerts), "repeat": 0, "ignored": 0, "unusable": 0}

    def health(self) -> tuple[bool, str]:
        return True, "ok: stub"

    def close_breaker(self, who: str = "") -> bool:
        self.closed = getattr(self, "closed", 0) + 1
        return self.closed == 1


class Listener:
    def __init__(self, security: Any = None, token: str | None = None, context: ssl.SSLContext | None = None) -> None:
        self.remediator = StubRemediator()
        self.metrics = RemediationMetrics("dry-run")
        self.receiver = WebhookReceiver("127.0.0.1:0", self.remediator, self.metrics,  # type: ignore[arg-type]
                                        security or load_web_security(""), bearer_token=token)
        self.context = context

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        if self.context is not None:
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                "127.0.0.1", self.receiver.port, timeout=10, context=self.context)
        else:
            connection = http.client.HTTPConnection("127.0.0.1", self.receiver.port, timeout=10)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def post(self, headers: dict[str, str] | None = None,
             body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        return self.request("POST", "/alerts", json.dumps(PAYLOAD).encode() if body is None else body,
                            {"Content-Type": "application/json", **(headers or {})})


@pytest.fixture
def listeners() -> Iterator[list[Listener]]:
    made: list[Listener] = []
    yield made
    for listener in made:
        listener.receiver.stop()


def start(made: list[Listener], **kwargs: Any) -> Listener:
    listener = Listener(**kwargs)
    listener.receiver.start()
    made.append(listener)
    return listener


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def web_config(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "web-config.yaml"
    path.write_text(text, encoding="utf-8")
    return load_web_security(str(path))


def test_a_bearer_token_is_required_for_alerts_only(listeners: list[Listener]) -> None:
    listener = start(listeners, token="s3cret")
    status, headers, _ = listener.post()
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert listener.post({"Authorization": "Bearer wrong"})[0] == 401
    status, _, body = listener.post({"Authorization": "Bearer s3cret"})
    assert status == 200 and json.loads(body) == {"status": "accepted", "new": 1, "repeat": 0, "ignored": 0,
                                                  "unusable": 0}
    assert len(listener.remediator.received) == 1
    status, _, metrics = listener.request("GET", "/metrics")  # Prometheus scrapes without the webhook's token
    assert status == 200
    assert b'gpu_pod_exporter_remediation_webhooks_total{result="unauthorized"} 2.0' in metrics
    assert b'gpu_pod_exporter_remediation_webhooks_total{result="accepted"} 1.0' in metrics
    assert b'gpu_pod_exporter_remediation_actions_total{action="taint",result="applied"} 0.0' in metrics
    assert listener.request("GET", "/health")[:1] == (200,)


def test_basic_auth_users_come_from_the_web_config_and_either_credential_works(listeners: list[Listener],
                                                                               tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"am-pass", bcrypt.gensalt(4)).decode()
    security = web_config(tmp_path, f"basic_auth_users:\n  alertmanager: {hashed}\n")
    listener = start(listeners, security=security, token="s3cret")
    assert listener.post(basic("alertmanager", "am-pass"))[0] == 200
    assert listener.post({"Authorization": "Bearer s3cret"})[0] == 200
    status, headers, _ = listener.post(basic("alertmanager", "wrong"))
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert listener.post({"Authorization": "Bearer am-pass"})[0] == 401
    assert listener.request("GET", "/metrics")[0] == 401  # basic-auth users guard the whole listener
    assert listener.request("GET", "/metrics", headers=basic("alertmanager", "am-pass"))[0] == 200
    assert listener.request("GET", "/health")[0] == 200


def test_tls_comes_from_the_same_web_config(listeners: list[Listener], tmp_path: Path) -> None:
    authority = CertificateAuthority("remediate test CA")
    cert, key = authority.issue("remediate").write_pair(tmp_path, "server")
    security = web_config(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    context = ssl.create_default_context(cadata=authority.pem.decode())
    listener = start(listeners, security=security, token="s3cret", context=context)
    assert listener.post({"Authorization": "Bearer s3cret"})[0] == 200
    plain = Listener.__new__(Listener)
    plain.receiver, plain.context = listener.receiver, None
    # Plain HTTP on the TLS port: refused with a readable answer, as on the exporter's port, and never handled.
    status, _, body = plain.post({"Authorization": "Bearer s3cret"})
    assert (status, b"use https://" in body) == (400, True)
    assert len(listener.remediator.received) == 1


def test_without_credentials_the_webhook_is_open(listeners: list[Listener]) -> None:
    listener = start(listeners)
    assert listener.post()[0] == 200
    assert listener.request("GET", "/metrics")[0] == 200


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "text"), [
    ("POST", "/alerts", b"{nope", {}, 400, b"not an Alertmanager v4 webhook payload: body is not JSON"),
    ("POST", "/alerts", json.dumps({**PAYLOAD, "version": "3"}).encode(), {}, 400, b'version: expected "4"'),
    ("POST", "/alerts", b"x", {"Content-Length": str(MAX_BODY_BYTES + 1)}, 413, b"body larger than"),
    ("POST", "/webhook", b"{}", {}, 404, b"Alertmanager posts to /alerts"),
    ("PUT", "/alerts", b"{}", {}, 405, b"method not allowed"),
    ("GET", "/nothing", None, {}, 404, b"not found"),
])
def test_what_is_refused_is_refused_before_any_work(listeners: list[Listener], method: str, path: str,
                                                    body: bytes | None, headers: dict[str, str], status: int,
                                                    text: bytes) -> None:
    listener = start(listeners)
    answer, _, content = listener.request(method, path, body, headers)
    assert (answer, text in content) == (status, True), content
    assert listener.remediator.received == []


def test_a_post_without_length_is_refused() -> None:
    listener = Listener()
    listener.receiver.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", listener.receiver.port, timeout=10)
        connection.putrequest("POST", "/alerts")
        connection.endheaders()
        assert connection.getresponse().status == 411
        connection.close()
    finally:
        listener.receiver.stop()


@pytest.mark.parametrize(("text", "expected"), [(":9401", ("", 9401)), ("127.0.0.1:0", ("127.0.0.1", 0)),
                                                ("[::1]:9401", ("::1", 9401))])
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["9401", "host:port", ":70000"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected \[host\]:port"):
        parse_listen_address(text)


def test_closing_the_breaker_needs_the_webhook_credentials(listeners: list[Listener]) -> None:
    listener = start(listeners, token="s3cret")
    status, _, _ = listener.request("POST", "/breaker/close", b"", {"Content-Length": "0"})
    assert status == 401 and not hasattr(listener.remediator, "closed")
    auth = {"Authorization": "Bearer s3cret", "Content-Length": "0"}
    assert listener.request("POST", "/breaker/close", b"", auth)[::2] == (200, b"circuit breaker closed\n")
    assert listener.request("POST", "/breaker/close", b"", auth)[::2] == (200, b"circuit breaker was not open\n")


def test_idle_sockets_do_not_hold_the_webhook(listeners: list[Listener]) -> None:
    """64 connections that send nothing (the thread-per-connection server this replaced had 16 slots, so
    its /health then timed out): the probe and a delivery are still answered."""
    listener = start(listeners, token="s3cret")
    idle = [socket.create_connection(("127.0.0.1", listener.receiver.port)) for _ in range(64)]
    try:
        assert listener.request("GET", "/health")[0] == 200
        assert listener.post({"Authorization": "Bearer s3cret"})[0] == 200
    finally:
        for sock in idle:
            sock.close()


def test_a_body_that_stops_arriving_is_cut_at_the_read_deadline(listeners: list[Listener],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "HEAD_TIMEOUT_S", 0.5)
    listener = start(listeners, token="s3cret")
    with socket.create_connection(("127.0.0.1", listener.receiver.port)) as slow:
        slow.sendall(b"POST /alerts HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nContent-Length: 1000\r\n\r\n{")
        assert listener.request("GET", "/health")[0] == 200  # answered while the body is awaited
        wait_for(lambda: closed_by_server(slow), 10, "the connection with the unfinished body to be cut")
    assert listener.remediator.received == []
    assert listener.post({"Authorization": "Bearer s3cret"})[0] == 200


def test_a_body_in_several_pieces_is_read_whole(listeners: list[Listener]) -> None:
    listener = start(listeners, token="s3cret")
    body = json.dumps(PAYLOAD).encode()
    with socket.create_connection(("127.0.0.1", listener.receiver.port)) as client:
        client.sendall(b"POST /alerts HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n"
                       + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        wait_for(lambda: listener.receiver.open_connections == 1, 10, "the request head to be read")
        client.sendall(body[10:])
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200 OK") and b'"status": "accepted"' in answer
    assert [alert.name for alert in listener.remediator.received[0].alerts] == ["GpuXidFatal"]


class SlowPasswordCheck(WebSecurity):
    """Basic-auth users whose password check (bcrypt, off the event loop) finishes when the test says so."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(basic_auth_users={"alertmanager": "hash"})
        self.release = threading.Event()

    def decide(self, headers: Any) -> Decision:
        return lambda: None if self.release.wait(10) else "realm"


def test_a_body_sent_while_the_password_is_checked_is_read_after_the_check(listeners: list[Listener]) -> None:
    security = SlowPasswordCheck()
    listener = start(listeners, security=security)
    body = json.dumps(PAYLOAD).encode()
    with socket.create_connection(("127.0.0.1", listener.receiver.port)) as client:
        authorization = basic("alertmanager", "pw")["Authorization"]
        client.sendall(f"POST /alerts HTTP/1.1\r\nAuthorization: {authorization}\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n".encode())
        client.sendall(body)  # arrives while the check runs: held by the kernel, read once it passes
        security.release.set()
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200 OK"), answer
    assert len(listener.remediator.received) == 1
