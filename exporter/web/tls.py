"""Server ``ssl.SSLContext`` from a validated ``tls_server_config``, and the client-SAN check.

A context is built once per certificate change (``exporter.web.security`` decides when) and then
shared by every connection, so a handshake costs no file I/O. Building it is also how the files
are validated at start-up: an unreadable file, a key that does not match its certificate, or a
CA file without certificates becomes a ``WebConfigError`` naming the web config's line and key.

How exporter-toolkit's ``client_auth_type`` maps onto OpenSSL through Python's ``ssl`` (which has
no "accept any certificate" verify callback):

* ``NoClientCert``: no certificate is asked for (``CERT_NONE``).
* ``RequestClientCert``: Go asks for a certificate but never verifies or uses it; the exporter
  never reads an unverified certificate, so it behaves like ``NoClientCert``: everyone is served.
* ``RequireAnyClientCert``: a certificate is required and, unlike Go, verified against
  ``client_ca_file`` (stricter; the parser requires the CA for this reason).
* ``VerifyClientCertIfGiven``: ``CERT_OPTIONAL``: no certificate is fine, a bad one is refused.
* ``RequireAndVerifyClientCert``: ``CERT_REQUIRED``: the secure mTLS setting.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from exporter.inputfile import InputFileError, read_bytes
from exporter.web.tlsnames import check_cipher_suite, check_curve
from exporter.web.webconfig import TlsServerConfig, WebConfig

_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}

MAX_PEM_BYTES = 1024 * 1024  # a certificate chain or CA bundle is a few KiB; 1 MiB is generous

# The SAN kinds Go's toolkit matches (DNS, IP, e-mail, URI), as ssl.getpeercert() names them.
_SAN_KINDS = {"DNS", "IP Address", "email", "URI"}


def build_server_context(config: WebConfig) -> ssl.SSLContext | None:
    """The server context for ``config`` (None without TLS); raises ``WebConfigError`` on bad files."""
    tls = config.tls
    if tls is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = tls.min_version
    context.maximum_version = tls.max_version
    _apply_ciphers(context, tls, config)
    if tls.curve_preferences:
        # Python's ssl can pin one group only: the most preferred one (see curve_note()).
        context.set_ecdh_curve(check_curve(tls.curve_preferences[0]))
    _load_certificate(context, tls, config)
    context.verify_mode = _VERIFY_MODES[tls.client_auth_type]
    if context.verify_mode != ssl.CERT_NONE:
        _load_client_ca(context, tls, config)
    return context


def curve_note(tls: TlsServerConfig) -> str | None:
    """What the user should know when curve_preferences lists more than Python's ssl can apply."""
    if len(tls.curve_preferences) <= 1:
        return None
    return (f"curve_preferences: Python's ssl can restrict the key exchange to one curve only; using "
            f"{tls.curve_preferences[0]}, not offering {', '.join(tls.curve_preferences[1:])}")


def _apply_ciphers(context: ssl.SSLContext, tls: TlsServerConfig, config: WebConfig) -> None:
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    names = [name for name in (check_cipher_suite(suite) for suite in tls.cipher_suites) if name is not None]
    if names:
        try:
            context.set_ciphers(":".join(dict.fromkeys(names)))
        except ssl.SSLError as exc:  # each name passed alone; together they should too
            raise config.error("tls_server_config.cipher_suites", f"OpenSSL refused the list: {exc}") from None


def _read(path: str, config: WebConfig, key: str) -> bytes:
    try:
        return read_bytes(path, MAX_PEM_BYTES)  # a regular file of bounded size (not /dev/zero, not a FIFO)
    except InputFileError as exc:
        raise config.error(key, f"cannot read {path}: {str(exc).removeprefix('cannot read: ')}") from None


@contextmanager
def _inline_file(pem: str, name: str) -> Iterator[str]:
    """A path that reads as ``pem`` without touching the disk (the root filesystem may be read-only)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, pem.encode("utf-8"))
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _load_certificate(context: ssl.SSLContext, tls: TlsServerConfig, config: WebConfig) -> None:
    cert_key = "tls_server_config.cert_file" if tls.cert_file else "tls_server_config.cert"
    key_key = "tls_server_config.key_file" if tls.key_file else "tls_server_config.key"
    cert_pem = _read(tls.cert_file, config, cert_key) if tls.cert_file else tls.cert.encode("utf-8")
    key_pem = _read(tls.key_file, config, key_key) if tls.key_file else tls.key.encode("utf-8")
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        raise config.error(cert_key, "no PEM certificate (-----BEGIN CERTIFICATE-----) found")
    if b"PRIVATE KEY-----" not in key_pem:
        raise config.error(key_key, "no PEM private key (-----BEGIN ... PRIVATE KEY-----) found")
    try:
        with _inline_file(cert_pem.decode("utf-8", "replace"), "web-cert") as cert_path, \
                _inline_file(key_pem.decode("utf-8", "replace"), "web-key") as key_path:
            # Loading copies of the bytes just read means the certificate and key come from the same
            # moment even while a rotation rewrites the files. An encrypted key gets an empty
            # password (an error) instead of OpenSSL prompting on a terminal that is not there.
            context.load_cert_chain(cert_path, key_path, password=lambda: b"")
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if "KEY_VALUES_MISMATCH" in reason:
            message = "the private key does not match the certificate"
        elif "BAD_DECRYPT" in reason or "bad decrypt" in str(exc):
            message = "the private key is encrypted; give an unencrypted key"
        else:
            message = f"OpenSSL cannot load the certificate and key: {reason}"
        raise config.error(key_key, message) from None


def _load_client_ca(context: ssl.SSLContext, tls: TlsServerConfig, config: WebConfig) -> None:
    ca_key = "tls_server_config.client_ca_file" if tls.client_ca_file else "tls_server_config.client_ca"
    pem = _read(tls.client_ca_file, config, ca_key).decode("utf-8", "replace") if tls.client_ca_file \
        else tls.client_ca
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise config.error(ca_key, "no PEM certificate (-----BEGIN CERTIFICATE-----) found")
    try:
        context.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise config.error(ca_key, f"OpenSSL cannot load the CA certificates: {exc.reason or exc}") from None


def _normal(kind: str, value: str) -> str:
    if kind == "IP Address":
        try:
            return str(ipaddress.ip_address(value.strip()))
        except ValueError:
            return value.strip()
    return value


def peer_san_allowed(peer: Mapping[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """True when ``allowed`` is empty or a SAN of the (verified) client certificate matches exactly."""
    if not allowed:
        return True
    if not peer:
        return False
    wanted = {_normal("IP Address", name) for name in allowed} | set(allowed)
    sans = peer.get("subjectAltName", ())
    if not isinstance(sans, tuple):
        return False
    for entry in sans:
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] in _SAN_KINDS \
                and _normal(str(entry[0]), str(entry[1])) in wanted:
            return True
    return False
