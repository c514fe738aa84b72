"""HTTP basic authentication against exporter-toolkit's ``basic_auth_users`` (bcrypt hashes).

What an attacker must not learn, and how:

* **Which users exist.** An unknown user name is verified against a dummy bcrypt hash of the
  same cost as the real ones, so every wrong guess costs the same bcrypt work whether or not the
  name exists; the dummy can never authenticate anyone (the result is discarded). The user is
  looked up by comparing digests of the names with ``hmac.compare_digest``.
* **Nothing, by burning CPU.** bcrypt is slow on purpose (cost 10: ~70-200 ms). Verifications
  run under a bounded semaphore (one at a time by default, as the toolkit's mutex), so a flood
  of bad passwords queues up instead of taking every core from the sampler.

Prometheus scrapes every few seconds with the same credentials, so a successful verification is
remembered, keyed by an HMAC (with a per-process random key) of user, hash and password: the
bcrypt cost is paid once, a changed hash or password misses the cache, and the process memory
never holds the password or a plain digest of it. Failures are never cached.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

import bcrypt

from exporter.web.webconfig import bcrypt_cost

REALM = "gpu-pod-exporter"
# bcrypt only looks at the first 72 bytes; longer passwords are refused (Go's bcrypt does the same)
# rather than silently truncated.
MAX_PASSWORD_BYTES = 72
DEFAULT_COST = 10
CACHE_SIZE = 1024

Verifier = Callable[[bytes, bytes], bool]

_BCRYPT_ALPHABET = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def dummy_hash(cost: int) -> bytes:
    """A well-formed bcrypt hash of nothing: verifying against it costs what a real one costs.

    A random salt plus a random digest: ``checkpw`` still runs the full key schedule at ``cost``
    before comparing, so a wrong password for a real user and any password for an unknown user
    take the same time, and building it costs nothing at start (``hashpw`` at cost 14 takes seconds).
    """
    digest = "".join(secrets.choice(_BCRYPT_ALPHABET) for _ in range(31))
    return bcrypt.gensalt(cost) + digest.encode("ascii")


def _bcrypt_verify(password: bytes, hashed: bytes) -> bool:
    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # a malformed hash; the parser rejects those, so this is belt and braces
        return False


class BasicAuth:
    """Callable as the server's ``authenticate(headers)``: None when allowed, else the realm for a 401."""

    def __init__(self, users: Mapping[str, str], *, verify: Verifier = _bcrypt_verify,
                 max_concurrent: int = 1, realm: str = REALM) -> None:
        self.realm = realm
        self._verify = verify
        self._users = [(self._name_digest(name), hashed.encode("ascii")) for name, hashed in users.items()]
        cost = max((bcrypt_cost(hashed) for hashed in users.values()), default=DEFAULT_COST)
        self.dummy_hash = dummy_hash(cost)
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._cache_key = secrets.token_bytes(32)
        self._verified: set[bytes] = set()
        self._cache_lock = threading.Lock()

    @staticmethod
    def _name_digest(name: str) -> bytes:
        return hashlib.sha256(name.encode("utf-8")).digest()

    def _stored_hash(self, user: str) -> bytes | None:
        """The user's hash; every configured name is compared, in constant time per name."""
        probe = self._name_digest(user)
        found: bytes | None = None
        for name_digest, hashed in self._users:
            if hmac.compare_digest(name_digest, probe):
                found = hashed
        return found

    def prepare(self, user: str, password: str) -> bool | Callable[[], bool]:
        """The answer when it needs no bcrypt (cached, or refused outright), else the job that finds it.

        The listener calls this on its event loop and runs a returned job in its small bcrypt pool,
        so a flood of bad passwords queues there while credentials verified before are answered
        at once.
        """
        secret = password.encode("utf-8")
        if len(secret) > MAX_PASSWORD_BYTES:
            return False  # refused for every user alike, before any lookup
        stored = self._stored_hash(user)
        hashed = stored if stored is not None else self.dummy_hash
        token = hmac.new(self._cache_key, b"\0".join((user.encode("utf-8"), hashed, secret)), hashlib.sha256).digest()
        with self._cache_lock:
            if stored is not None and token in self._verified:
                return True

        def verify() -> bool:
            with self._slots:
                matches = self._verify(secret, hashed)
            if stored is None or not matches:
                return False
            with self._cache_lock:
                if len(self._verified) >= CACHE_SIZE:
                    self._verified.clear()
                self._verified.add(token)
            return True

        return verify

    def decide(self, headers: Any) -> str | Callable[[], str | None] | None:
        """None to allow, the realm to refuse, or a job (bcrypt) whose result is one of those."""
        credentials = parse_basic_authorization(headers.get("Authorization", ""))
        if credentials is None:
            return self.realm
        job = self.prepare(*credentials)
        if isinstance(job, bool):
            return None if job else self.realm
        return lambda: None if job() else self.realm

    def __call__(self, headers: Any) -> str | None:
        decision = self.decide(headers)
        return decision() if callable(decision) else decision


def parse_basic_authorization(value: str) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` -> (user, password); None for anything else."""
    scheme, _, encoded = value.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded.strip():
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon:
        return None
    return user, password
