"""Go's TLS names (as web configs spell them) translated to what Python's ``ssl``/OpenSSL accepts.

exporter-toolkit configs name cipher suites by Go's constants (the IANA names, e.g.
``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``) and curves by Go's ``CurveID`` names
(``CurveP256``). OpenSSL spells the same things differently (``ECDHE-RSA-AES128-GCM-SHA256``,
``prime256v1``), and a given OpenSSL build may not offer all of them (OpenSSL 3 has no RC4 or
3DES at the default security level). Each check says which of the three cases a name is in:
unknown, known but unavailable here, or usable.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

# TLS 1.3 suites: always enabled by OpenSSL and not configurable through Python's ssl (Go ignores
# them in cipher_suites too), so naming them is accepted and changes nothing.
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})

# Go's crypto/tls CipherSuites() and InsecureCipherSuites() for TLS <= 1.2 -> OpenSSL names.
CIPHER_SUITES: Mapping[str, str] = MappingProxyType({
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
})

# Go's tls.CurveID names -> OpenSSL group names.
CURVES: Mapping[str, str] = MappingProxyType({
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
    "X25519MLKEM768": "X25519MLKEM768",
})


@cache
def _openssl_accepts_cipher(openssl_name: str) -> bool:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(openssl_name)
    except ssl.SSLError:
        return False
    return True


@cache
def _openssl_accepts_curve(openssl_name: str) -> bool:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ecdh_curve(openssl_name)
    except (ValueError, ssl.SSLError):
        return False
    return True


def check_cipher_suite(name: str) -> str | None:
    """The OpenSSL name for a TLS <= 1.2 suite, None for a TLS 1.3 suite; ValueError if unusable."""
    if name in TLS13_SUITES:
        return None
    openssl_name = CIPHER_SUITES.get(name)
    if openssl_name is None:
        raise ValueError(f"unknown cipher suite {name!r} (Go names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; "
                         f"known: {', '.join(sorted({*CIPHER_SUITES, *TLS13_SUITES}))})")
    if not _openssl_accepts_cipher(openssl_name):
        raise ValueError(f"cipher suite {name} ({openssl_name}) is not available in {ssl.OPENSSL_VERSION}")
    return openssl_name


def check_curve(name: str) -> str:
    """The OpenSSL group name for a Go curve name; ValueError if unknown or unavailable here."""
    openssl_name = CURVES.get(name)
    if openssl_name is None:
        raise ValueError(f"unknown curve {name!r} (known: {', '.join(CURVES)})")
    if not _openssl_accepts_curve(openssl_name):
        raise ValueError(f"curve {name} is not available in {ssl.OPENSSL_VERSION}")
    return openssl_name
