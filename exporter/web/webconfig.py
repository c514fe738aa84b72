"""The web config file (``--web-config-file``): Prometheus exporter-toolkit's format, parsed strictly.

Users of dcgm-exporter, node_exporter and the charts that template them already have a
``web-config.yml``; accepting the same keys means that file keeps working here unchanged.
Parsing is strict in the toolkit's spirit and stricter in one way that matters for a security
setting: an unknown or misspelt key is an error (a typo in ``basic_auth_users`` must not
silently leave the endpoint open), and so is a duplicated key. Every error names the file, the
line and the dotted key path, e.g. ``web.yml:4: tls_server_config.min_version: ...``.

Only the syntax and the values are checked here; whether the certificate files load is the
concern of ``exporter.web.tls`` and the hashes are used by ``exporter.web.auth``. Nothing in
this module logs, and no error message quotes a password hash or an inline key.

Supported keys (exporter-toolkit ``docs/web-configuration.md``)::

    tls_server_config:
      cert_file, key_file | cert, key          # server certificate chain and key (files or inline PEM)
      client_ca_file | client_ca               # CA bundle for client certificates
      client_auth_type                         # NoClientCert (default), RequestClientCert,
                                               # RequireAnyClientCert, VerifyClientCertIfGiven,
                                               # RequireAndVerifyClientCert
      client_allowed_sans: [str]               # exact SAN match (DNS, IP, e-mail or URI)
      min_version, max_version                 # TLS10..TLS13 (default TLS12..TLS13)
      cipher_suites: [Go/IANA name]            # TLS <= 1.2 suites
      prefer_server_cipher_suites: bool        # default true
      curve_preferences: [CurveP256 | CurveP384 | CurveP521 | X25519]
    http_server_config:
      http2: bool                              # accepted; this server speaks HTTP/1.x only
      headers: {Content-Security-Policy, X-Frame-Options, X-Content-Type-Options,
                X-XSS-Protection, Strict-Transport-Security}
    basic_auth_users: {user: bcrypt hash}
    rate_limit: {interval: Go duration, burst: int}
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from exporter import safeyaml
from exporter.options import ConfigError
from exporter.safeyaml import YamlValue
from exporter.units import parse_go_duration
from exporter.web.tlsnames import check_cipher_suite, check_curve

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)

TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = MappingProxyType({
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
})

# The toolkit's header allowlist, with the canonical spelling and the values it restricts.
ALLOWED_HEADERS: Mapping[str, tuple[str, ...] | None] = MappingProxyType({
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
})

# $2a$/$2b$/$2x$/$2y$ (htpasswd -B writes $2y$), two-digit cost, 22 salt + 31 hash characters.
_BCRYPT_HASH = re.compile(r"^\$2[abxy]\$(?P<cost>\d\d)\$[./A-Za-z0-9]{53}$")



class WebConfigError(ConfigError):
    """A mistake in the web config; ``str()`` is ``file:line: key.path: message``."""


@dataclass(frozen=True)
class TlsServerConfig:
    """``tls_server_config``; file paths are absolute (relative ones resolve against the config's folder)."""

    cert_file: str = ""
    key_file: str = ""
    cert: str = ""  # inline PEM
    key: str = field(default="", repr=False)  # inline PEM; a secret, never shown
    client_ca_file: str = ""
    client_ca: str = ""  # inline PEM
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()

    @property
    def watched_files(self) -> tuple[str, ...]:
        """The files whose change means the SSL context must be rebuilt."""
        return tuple(path for path in (self.cert_file, self.key_file, self.client_ca_file) if path)


@dataclass(frozen=True)
class RateLimit:
    interval_s: float
    burst: int


@dataclass(frozen=True)
class WebConfig:
    """The validated file. ``lines`` maps each dotted key path to its line, for later error messages."""

    path: str = ""
    tls: TlsServerConfig | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=dict, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)
    http2: bool = True
    rate_limit: RateLimit | None = None
    lines: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def where(self, key: str) -> str:
        """``file:line`` of ``key`` (or of its closest parent that has a line)."""
        probe = key
        while probe:
            if probe in self.lines:
                return f"{self.path}:{self.lines[probe]}"
            probe = probe.rpartition(".")[0]
        return self.path

    def error(self, key: str, message: str) -> WebConfigError:
        return WebConfigError(self.where(key), key, message)


def bcrypt_cost(hashed: str) -> int:
    match = _BCRYPT_HASH.match(hashed)
    if match is None:
        raise ValueError("not a bcrypt hash")
    return int(match.group("cost"))


# ---------------------------------------------------------------------------------------------
# A YAML node with its key path, so that every check can say where it failed.


class _Node(YamlValue):
    """The shared reader (``exporter.safeyaml``) with the web config's two conveniences: an empty value
    is an empty string, and lists of strings. Errors name the key's line and never quote a value."""

    @property
    def key(self) -> str:
        return self.path

    @property
    def lines(self) -> dict[str, int]:
        return self.file.lines

    def string(self) -> str:
        value = self.scalar()
        if value is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(f"expected a string, got {self.describe()}")
        return str(value)

    def string_list(self) -> tuple[str, ...]:
        items = []
        for item in self.sequence():
            line = item.line
            if line is not None:
                self.lines.setdefault(item.path, line)
            items.append(item.string())
        return tuple(items)


# ---------------------------------------------------------------------------------------------


def load_web_config(path: str) -> WebConfig:
    """Read and validate the file; raises ``WebConfigError`` (one line: file, line, key)."""
    file = _web_config_file(path)
    return _build(file, file.load("web-config-file"))


def parse_web_config(text: str, path: str) -> WebConfig:
    file = _web_config_file(path)
    return _build(file, file.read(text))


def _web_config_file(path: str) -> safeyaml.YamlFile:
    """No aliases, bounded nesting, standard tags; errors name the key's line and quote no value."""
    return safeyaml.YamlFile(path, WebConfigError.at, key_lines=True, document_key="web config")


def _build(file: safeyaml.YamlFile, root: YamlValue | None) -> WebConfig:
    path = file.source
    if root is None:
        return WebConfig(path=path)  # an empty file: plain HTTP, no authentication (as the toolkit)
    top = _Node(root.node, "", file).mapping(("tls_server_config", "http_server_config", "basic_auth_users",
                                                "rate_limit"))
    base = Path(path).resolve().parent
    tls = _tls(top["tls_server_config"], base) if "tls_server_config" in top else None
    http2, headers = _http(top["http_server_config"]) if "http_server_config" in top else (True, {})
    users = _users(top["basic_auth_users"]) if "basic_auth_users" in top else {}
    rate_limit = _rate_limit(top["rate_limit"]) if "rate_limit" in top else None
    return WebConfig(path=path, tls=tls, basic_auth_users=MappingProxyType(users),
                     headers=MappingProxyType(headers), http2=http2, rate_limit=rate_limit,
                     lines=MappingProxyType(file.lines))


def _file(node: _Node, base: Path) -> str:
    text = node.string().strip()
    if not text:
        return ""
    return str(base / text) if not Path(text).is_absolute() else text


def _tls(node: _Node, base: Path) -> TlsServerConfig | None:
    keys = node.mapping(("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca", "client_auth_type",
                         "client_allowed_sans", "min_version", "max_version", "cipher_suites",
                         "prefer_server_cipher_suites", "curve_preferences"))
    if not keys:
        return None  # "tls_server_config:" with nothing under it: plain HTTP, as the toolkit does
    values = _tls_material(node, keys, base)
    auth = _client_auth_type(keys, has_ca=bool(values.get("client_ca_file") or values.get("client_ca")))
    values["client_auth_type"] = auth
    if "client_allowed_sans" in keys:
        values["client_allowed_sans"] = _client_allowed_sans(keys["client_allowed_sans"], auth)
    values.update(_tls_versions(node, keys))
    values.update(_tls_name_lists(node, keys))
    if "prefer_server_cipher_suites" in keys:
        values["prefer_server_cipher_suites"] = keys["prefer_server_cipher_suites"].boolean()
    return TlsServerConfig(**values)  # type: ignore[arg-type]


def _tls_material(node: _Node, keys: dict[str, _Node], base: Path) -> dict[str, object]:
    """The certificate, key and client CA: each from a file or inline PEM, never both; cert and key required."""
    values: dict[str, object] = {}
    for name in ("cert_file", "key_file", "client_ca_file"):
        if name in keys:
            values[name] = _file(keys[name], base)
    for name in ("cert", "key", "client_ca"):
        if name in keys:
            values[name] = keys[name].string()
    for inline, path in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if values.get(inline) and values.get(path):
            raise keys[inline].error(f"give either {inline} or {path}, not both")
    if not (values.get("cert") or values.get("cert_file")):
        raise node.error("missing cert_file (or inline cert): TLS needs the server certificate")
    if not (values.get("key") or values.get("key_file")):
        raise node.error("missing key_file (or inline key): TLS needs the server's private key")
    return values


def _client_auth_type(keys: dict[str, _Node], *, has_ca: bool) -> str:
    """``client_auth_type``, consistent with the client CA: a CA needs a type that asks for certificates,
    and a type that verifies them (or Python's ssl, for RequireAnyClientCert) needs the CA."""
    auth = "NoClientCert"
    if "client_auth_type" in keys:
        auth = keys["client_auth_type"].string().strip() or "NoClientCert"
        if auth not in CLIENT_AUTH_TYPES:
            raise keys["client_auth_type"].error(
                f"invalid value {auth!r}: expected one of {', '.join(CLIENT_AUTH_TYPES)}")
    ca_key = keys.get("client_ca_file") or keys.get("client_ca")
    if has_ca and auth == "NoClientCert" and ca_key is not None:
        raise ca_key.error("a client CA is set but client_auth_type is NoClientCert: set client_auth_type "
                           "(RequireAndVerifyClientCert for mTLS) or remove the CA")
    if auth in {"VerifyClientCertIfGiven", "RequireAndVerifyClientCert"} and not has_ca:
        raise keys["client_auth_type"].error(f"{auth} needs client_ca_file (the CA that signs client certificates)")
    if auth == "RequireAnyClientCert" and not has_ca:
        raise keys["client_auth_type"].error(
            "RequireAnyClientCert needs client_ca_file here: Python's ssl only accepts client certificates it "
            "can verify (RequireAndVerifyClientCert is the secure choice anyway)")
    return auth


def _client_allowed_sans(node: _Node, auth: str) -> tuple[str, ...]:
    sans = node.string_list()
    if sans and auth not in {"RequireAnyClientCert", "RequireAndVerifyClientCert"}:
        raise node.error(
            "needs client_auth_type RequireAndVerifyClientCert (or RequireAnyClientCert): otherwise a client "
            "may connect without a certificate and there is no SAN to check")
    return sans


def _tls_versions(node: _Node, keys: dict[str, _Node]) -> dict[str, ssl.TLSVersion]:
    """``min_version`` and ``max_version`` when given; the range (defaults TLS12..TLS13) must not be empty."""
    values: dict[str, ssl.TLSVersion] = {}
    for name in ("min_version", "max_version"):
        if name in keys:
            text = keys[name].string().strip()
            if text not in TLS_VERSIONS:
                raise keys[name].error(f"invalid value {text!r}: expected one of {', '.join(TLS_VERSIONS)}")
            values[name] = TLS_VERSIONS[text]
    minimum = values.get("min_version", ssl.TLSVersion.TLSv1_2)
    maximum = values.get("max_version", ssl.TLSVersion.TLSv1_3)
    if minimum > maximum:
        raise (keys.get("min_version") or node).error("min_version is newer than max_version")
    return values


def _tls_name_lists(node: _Node, keys: dict[str, _Node]) -> dict[str, tuple[str, ...]]:
    """``cipher_suites`` and ``curve_preferences``: Go's names, each checked, the error at its list item."""
    values: dict[str, tuple[str, ...]] = {}
    for name, check in (("cipher_suites", check_cipher_suite), ("curve_preferences", check_curve)):
        if name in keys:
            items = keys[name].string_list()
            for index, item in enumerate(items):
                try:
                    check(item)
                except ValueError as exc:
                    item_key = f"{keys[name].key}[{index}]"
                    raise WebConfigError(f"{node.source}:{node.lines.get(item_key, 0)}", item_key, str(exc)) from None
            values[name] = items
    return values


def _http(node: _Node) -> tuple[bool, dict[str, str]]:
    keys = node.mapping(("http2", "headers"))
    http2 = keys["http2"].boolean() if "http2" in keys else True
    headers: dict[str, str] = {}
    if "headers" in keys:
        canonical = {name.lower(): name for name in ALLOWED_HEADERS}
        for name, value_node in keys["headers"].mapping().items():
            proper = canonical.get(name.lower())
            if proper is None:
                raise value_node.error(f"header {name!r} is not allowed (allowed: {', '.join(ALLOWED_HEADERS)})")
            value = value_node.string().strip()
            if any(ch in value for ch in "\r\n\0"):
                raise value_node.error("a header value must be a single line")
            odd = next((ch for ch in value if not (" " <= ch <= "~" or ch == "\t")), None)
            if odd is not None:  # what HTTP/1.1 can carry everywhere (RFC 9110 5.5: visible ASCII, space, tab)
                raise value_node.error(f"a header value may hold only printable ASCII characters, not U+{ord(odd):04X} "
                                       "(typographic quotes or dashes pasted from a document?)")
            allowed_values = ALLOWED_HEADERS[proper]
            if value and allowed_values is not None and value.lower() not in allowed_values:
                raise value_node.error(f"invalid value {value!r}: expected one of {', '.join(allowed_values)}")
            if value:  # blank means "do not send", as in the toolkit
                headers[proper] = value
    return http2, headers


def _users(node: _Node) -> dict[str, str]:
    users: dict[str, str] = {}
    for name, value_node in node.mapping().items():
        if not name or ":" in name:
            raise value_node.error("a basic-auth user name must be non-empty and contain no ':'")
        hashed = value_node.string().strip()
        try:
            bcrypt_cost(hashed)
        except ValueError:
            # Do not quote the value: it may be a plain password put here by mistake.
            raise value_node.error("not a bcrypt hash (expected $2y$10$... as written by htpasswd -nBC 10 \"\"); "
                                   "plain passwords are not accepted") from None
        users[name] = hashed
    return users


def _rate_limit(node: _Node) -> RateLimit | None:
    keys = node.mapping(("interval", "burst"))
    interval_s = 0.0
    if "interval" in keys:
        try:
            interval_s = parse_go_duration(keys["interval"].string())
        except ValueError as exc:
            raise keys["interval"].error(str(exc)) from None
        if interval_s < 0:
            raise keys["interval"].error("must not be negative")
    if interval_s == 0:
        return None  # the toolkit's "0 disables the limiter"
    burst = keys["burst"].integer() if "burst" in keys else 0
    if burst < 1:
        raise (keys.get("burst") or node).error("burst must be at least 1 when interval is set")
    return RateLimit(interval_s=interval_s, burst=burst)
