"""The web config file as the listener's ``WebSecurity``, kept current while the exporter runs.

exporter-toolkit re-reads its web config on every request so that a renewed certificate is used
without a restart. Here the same effect costs less: a background thread (``web-config-reload``,
supervised) stats the config file and the files it names (certificate, key, client CA) once per
second.
Only when one of them changed (device, inode, mtime or size: a Kubernetes Secret update swaps a
symlink, so the inode changes) is the config parsed and a new ``SSLContext`` built; everything
between checks uses the prepared context and authenticator, so a handshake does no file I/O.

A change that does not load, for any reason (a half-written key, a certificate that does not
match its key, a typo in the YAML, a YAML bomb, a header value HTTP cannot carry, even a bug) is
rejected as a whole: the exporter keeps serving with the previous settings and logs the reason
once for that state of the files; the next change is tried again. The event loop never reads a
file: it only picks up the prepared settings. Whether
TLS is on cannot change without a restart (a client would not know which scheme to use).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.logs import get_logger
from exporter.supervisor import supervised
from exporter.web.auth import BasicAuth
from exporter.web.ratelimit import TokenBucket
from exporter.web.server import Decision, WebSecurity
from exporter.web.tls import build_server_context, curve_note, peer_san_allowed
from exporter.web.webconfig import WebConfig, WebConfigError, load_web_config

log = get_logger("web")

RELOAD_CHECK_INTERVAL_S = 1.0

Fingerprint = tuple[tuple[object, ...], ...]


def fingerprint(paths: tuple[str, ...]) -> Fingerprint:
    """Identity of each file's current content as far as stat can tell (follows symlinks)."""
    states: list[tuple[object, ...]] = []
    for path in paths:
        try:
            info = Path(path).stat()
        except OSError as exc:
            states.append((path, "missing", exc.errno))
        else:
            states.append((path, info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size))
    return tuple(states)


@dataclass(frozen=True)
class _Active:
    """Everything prepared from one consistent state of the files."""

    config: WebConfig
    fingerprint: Fingerprint
    context: ssl.SSLContext | None
    auth: BasicAuth | None
    limiter: TokenBucket | None


def _watched(config: WebConfig) -> tuple[str, ...]:
    return (config.path, *(config.tls.watched_files if config.tls else ()))


def notes(config: WebConfig) -> list[str]:
    """Things about a valid config that the operator should hear once (logged at start and reload)."""
    found: list[str] = []
    tls = config.tls
    if tls is None and config.basic_auth_users:
        found.append("basic auth without TLS: passwords cross the network in clear text; add tls_server_config")
    if tls is not None:
        note = curve_note(tls)
        if note:
            found.append(note)
        if tls.min_version < ssl.TLSVersion.TLSv1_2:
            found.append("min_version below TLS12: OpenSSL's default security level still refuses TLS 1.0/1.1 "
                         "handshakes")
        if tls.client_auth_type == "RequestClientCert":
            found.append("client_auth_type RequestClientCert: client certificates are not checked; "
                         "use RequireAndVerifyClientCert for mTLS")
        if tls.client_auth_type == "RequireAnyClientCert":
            found.append("client_auth_type RequireAnyClientCert: client certificates must verify against "
                         "client_ca_file (stricter than Go); RequireAndVerifyClientCert says so explicitly")
    return found


class FileWebSecurity(WebSecurity):
    """TLS, mTLS, basic auth, response headers and rate limit from an exporter-toolkit web config file."""

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic,
                 check_interval_s: float = RELOAD_CHECK_INTERVAL_S) -> None:
        self.path = path
        self._clock = clock
        self._check_interval_s = check_interval_s
        self._active = self._prepare(None)  # raises WebConfigError: the caller reports it and exits 2
        self._next_check = clock() + check_interval_s
        self._reload_lock = threading.Lock()
        self._rejected: Fingerprint | None = None
        self.reloads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._announce(self._active.config, "web config loaded")

    @property
    def config(self) -> WebConfig:
        return self._active.config

    def _prepare(self, previous: _Active | None) -> _Active:
        config_state = fingerprint((self.path,))
        config = load_web_config(self.path)
        # Stat before reading the certificate files: if they change while we read them, the next
        # check sees a newer state than the one recorded and loads again.
        state = config_state + fingerprint(_watched(config)[1:])
        context = build_server_context(config)
        if previous is not None and (previous.context is None) != (context is None):
            raise WebConfigError(config.where("tls_server_config"), "tls_server_config",
                                 "turning TLS on or off needs a restart of the exporter")
        auth: BasicAuth | None = None
        if config.basic_auth_users:
            same_users = previous is not None and previous.auth is not None \
                and dict(previous.config.basic_auth_users) == dict(config.basic_auth_users)
            auth = previous.auth if same_users and previous is not None else BasicAuth(config.basic_auth_users)
        limiter: TokenBucket | None = None
        if config.rate_limit is not None:
            same_limit = previous is not None and previous.config.rate_limit == config.rate_limit
            limiter = previous.limiter if same_limit and previous is not None else \
                TokenBucket(config.rate_limit.interval_s, config.rate_limit.burst)
        return _Active(config=config, fingerprint=state, context=context, auth=auth, limiter=limiter)

    def _announce(self, config: WebConfig, message: str) -> None:
        tls = config.tls
        log.info(message, extra={"fields": {
            "file": config.path,
            "tls": tls is not None,
            "client_auth": tls.client_auth_type if tls else "NoClientCert",
            "basic_auth_users": len(config.basic_auth_users),
            "headers": ",".join(config.headers) or "none",
            "rate_limit": "on" if config.rate_limit else "off",
        }})
        for note in notes(config):
            log.warning(note)

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = supervised(self._watch, name="web-config-reload", stop=self._stop)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _watch(self) -> None:
        while not self._stop.wait(self._check_interval_s):
            self.maybe_reload()

    def maybe_reload(self) -> None:
        """Reload if a watched file changed; checks at most once per ``check_interval_s``."""
        now = self._clock()
        if now < self._next_check or not self._reload_lock.acquire(blocking=False):
            return  # another connection is checking; use the current settings meanwhile
        try:
            if now < self._next_check:
                return
            self._next_check = now + self._check_interval_s
            active = self._active
            current = fingerprint(_watched(active.config))
            if current in (active.fingerprint, self._rejected):
                return
            try:
                prepared = self._prepare(active)
            except Exception as exc:  # noqa: BLE001 - any failure: keep serving with what worked
                self._rejected = current
                reason = str(exc) if isinstance(exc, WebConfigError) else \
                    f"{self.path}: cannot load the changed web config ({type(exc).__name__})"
                log.error("web config change not applied; still serving with the previous settings",  # noqa: TRY400
                          extra={"fields": {"error": reason}})  # one line, no traceback, no file content
                return
            self._active = prepared
            self._rejected = None
            self.reloads += 1
            self._announce(prepared.config, "web config reloaded")
        finally:
            self._reload_lock.release()

    # -- WebSecurity -------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext | None:
        if self._thread is None:
            self.maybe_reload()  # not started (tests, tools): check on use, at most once per interval
        return self._active.context

    def peer_allowed(self, connection: ssl.SSLObject | ssl.SSLSocket) -> bool:
        tls = self._active.config.tls
        if tls is None or not tls.client_allowed_sans:
            return True
        return peer_san_allowed(connection.getpeercert(), tls.client_allowed_sans)

    def allow_request(self) -> bool:
        limiter = self._active.limiter
        return limiter is None or limiter.allow()

    def authenticate(self, headers: Any) -> str | None:
        auth = self._active.auth
        return None if auth is None else auth(headers)

    def decide(self, headers: Any) -> Decision:
        auth = self._active.auth
        return None if auth is None else auth.decide(headers)

    def headers(self) -> Mapping[str, str]:
        return self._active.config.headers


def load_web_security(path: str) -> WebSecurity:
    """The listener's security for ``--web-config-file`` (plain HTTP when empty); raises WebConfigError."""
    if not path:
        return WebSecurity()
    return FileWebSecurity(path)

