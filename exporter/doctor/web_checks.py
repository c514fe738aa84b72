"""The HTTP listener: the web config loads (the exporter's own loader), the listen address is free or ours.

A port already taken is fine when the taker is this exporter (the doctor run with ``kubectl exec``
inside the DaemonSet pod finds its own exporter there): it answers with a ``Server:
gpu-pod-exporter/<version>`` header and its ``/health`` says how it is doing. Anything else on the
port means the exporter cannot start (dcgm-exporter also defaults to :9400).
"""

from __future__ import annotations

import errno
import http.client
import socket
import ssl

from exporter.config import Config
from exporter.doctor.report import Row, degraded, failed, ok
from exporter.web.security import FileWebSecurity, notes
from exporter.web.server import WebSecurity, parse_address

SECTION = "web"
PORT_HINT = ("choose another port with -a/--address (DCGM_EXPORTER_LISTEN), or stop the program holding it "
             "(a dcgm-exporter left on the node also listens on :9400)")


def check_web(config: Config, security: WebSecurity | None, timeout_s: float) -> list[Row]:
    rows: list[Row] = []
    if isinstance(security, FileWebSecurity):
        web = security.config
        parts = ["TLS" if web.tls else "plain HTTP"]
        if web.tls is not None and web.tls.client_auth_type != "NoClientCert":
            parts.append(f"client certificates {web.tls.client_auth_type}")
        if web.basic_auth_users:
            parts.append(f"basic auth ({len(web.basic_auth_users)} users)")
        if web.rate_limit is not None:
            parts.append(f"rate limit {web.rate_limit.burst} per {web.rate_limit.interval_s:g} s")
        found = notes(web)
        text = f"{config.web_config_file}: {', '.join(parts)}"
        if found:
            rows.append(degraded(SECTION, "config", f"{text}; {found[0]}", found[0]))
        else:
            rows.append(ok(SECTION, "config", text))
    elif security is not None:
        rows.append(ok(SECTION, "config", "no web config: plain HTTP without authentication"))
    rows.append(_listen_row(config.address, tls=isinstance(security, FileWebSecurity) and security.config.tls
                            is not None, timeout_s=timeout_s))
    return rows


def _listen_row(address: str, *, tls: bool, timeout_s: float) -> Row:
    host, port = parse_address(address)
    family = socket.AF_INET6 if (":" in host or host == "") and socket.has_ipv6 else socket.AF_INET
    bind_host = host or ("::" if family == socket.AF_INET6 else "0.0.0.0")  # noqa: S104 - ":9400" means all
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server binds
            probe.bind((bind_host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return _address_in_use(address, host, port, tls, timeout_s)
        if exc.errno == errno.EACCES:
            return failed(SECTION, "listen", f"{address}: permission denied", "ports below 1024 need "
                          "CAP_NET_BIND_SERVICE: use a higher port with -a/--address", address=address)
        if family == socket.AF_INET6 and not host:
            return ok(SECTION, "listen", f"{address} is free (IPv4 only: no IPv6 here)", address=address)
        return failed(SECTION, "listen", f"cannot listen on {address}: {exc.strerror or exc}",
                      "give an address of this machine with -a/--address", address=address)
    return ok(SECTION, "listen", f"{address} is free", address=address)


def _address_in_use(address: str, host: str, port: int, tls: bool, timeout_s: float) -> Row:
    target = host if host not in ("", "::", "0.0.0.0") else "127.0.0.1"  # noqa: S104
    server, detail = _identify(target, port, tls, timeout_s)
    if server.startswith("gpu-pod-exporter"):
        return ok(SECTION, "listen", f"{address} is in use by this exporter ({server}): {detail}", address=address,
                  server=server)
    who = f"{server}: {detail}" if server else detail
    return failed(SECTION, "listen", f"{address} is in use by another program ({who})", PORT_HINT, address=address,
                  server=server)


def _identify(host: str, port: int, tls: bool, timeout_s: float) -> tuple[str, str]:
    """The ``Server`` header and the /health answer of whatever listens there (("", why) if nothing says)."""
    connection: http.client.HTTPConnection
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # only to read the Server header of a local listener
        connection = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request("GET", "/health", headers={"User-Agent": "gpu-pod-exporter-doctor"})
        response = connection.getresponse()
        body = response.read(512).decode("utf-8", "replace").strip()
        return response.getheader("Server", "").strip(), f"/health {response.status}: {body[:160]}"
    except (OSError, http.client.HTTPException) as exc:
        return "", f"no HTTP answer ({exc})"
    finally:
        connection.close()
