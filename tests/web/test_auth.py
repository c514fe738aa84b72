"""Basic auth as an attacker and as Prometheus see it: same work for unknown users, one bcrypt per login.

Timing is asserted by counting calls to the verify function (a spy around the real bcrypt), never
by measuring wall time: "an unknown user costs one bcrypt verification, like a wrong password"
is the property that makes the timing indistinguishable, and a count cannot flake.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable

import bcrypt
import pytest

from exporter.web import auth as auth_module
from exporter.web.auth import REALM, BasicAuth, dummy_hash, parse_basic_authorization
from tests.support.polling import wait_for

COST = 4  # the cheapest bcrypt cost keeps the suite fast; the code paths are the same
PASSWORDS = {"prometheus": "scrape-pass", "admin": "admin-pass"}
USERS = {name: bcrypt.hashpw(password.encode(), bcrypt.gensalt(COST)).decode() for name, password in PASSWORDS.items()}


class Spy:
    """Wraps the real bcrypt check and records which hash each call used."""

    def __init__(self, result: Callable[[bytes, bytes], bool] = bcrypt.checkpw) -> None:
        self.calls: list[bytes] = []
        self._result = result

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.calls.append(hashed)
        return self._result(password, hashed)


def header(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_right_password_is_allowed_and_bcrypt_runs_once_for_repeated_scrapes() -> None:
    spy = Spy()
    auth = BasicAuth(USERS, verify=spy)
    for _ in range(5):
        assert auth(header("prometheus", "scrape-pass")) is None
    assert spy.calls == [USERS["prometheus"].encode()]


def test_wrong_password_gets_the_realm_and_every_attempt_costs_a_bcrypt() -> None:
    spy = Spy()
    auth = BasicAuth(USERS, verify=spy)
    for _ in range(3):
        assert auth(header("prometheus", "guess")) == REALM
    assert len(spy.calls) == 3  # failures are never cached


def test_an_unknown_user_costs_exactly_what_a_wrong_password_costs() -> None:
    spy = Spy()
    auth = BasicAuth(USERS, verify=spy)
    assert auth(header("mallory", "guess")) == REALM
    assert auth(header("prometheus", "guess")) == REALM
    unknown_call, known_call = spy.calls
    assert unknown_call == auth.dummy_hash
    assert known_call == USERS["prometheus"].encode()
    # the dummy hash has the same bcrypt cost as the real ones, so the work is the same
    assert unknown_call.split(b"$")[2] == known_call.split(b"$")[2] == b"%02d" % COST


def test_an_unknown_user_is_refused_even_if_the_dummy_check_succeeded() -> None:
    auth = BasicAuth(USERS, verify=Spy(result=lambda _password, _hashed: True))
    assert auth(header("mallory", "anything")) == REALM
    assert auth(header("mallory", "anything")) == REALM  # and nothing was cached for it


def test_a_changed_hash_or_password_misses_the_cache() -> None:
    spy = Spy()
    auth = BasicAuth(USERS, verify=spy)
    assert auth(header("prometheus", "scrape-pass")) is None
    assert auth(header("admin", "scrape-pass")) == REALM
    assert auth(header("admin", "admin-pass")) is None
    assert len(spy.calls) == 3
    rotated = BasicAuth({"prometheus": bcrypt.hashpw(b"new-pass", bcrypt.gensalt(COST)).decode()}, verify=spy)
    assert rotated(header("prometheus", "scrape-pass")) == REALM


@pytest.mark.parametrize("value", [
    "", "Bearer abc", "Basic", "Basic !!!notbase64", "Basic " + base64.b64encode(b"no-colon").decode(),
    "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),
])
def test_missing_or_malformed_authorization_is_refused_without_bcrypt(value: str) -> None:
    spy = Spy()
    auth = BasicAuth(USERS, verify=spy)
    assert auth({"Authorization": value} if value else {}) == REALM
    assert spy.calls == []


def test_passwords_longer_than_bcrypt_reads_are_refused_for_everyone_alike() -> None:
    spy = Spy()
    auth = BasicAuth(USERS, verify=spy)
    long_password = "scrape-pass" + "x" * 80
    assert auth(header("prometheus", long_password)) == REALM
    assert auth(header("mallory", long_password)) == REALM
    assert spy.calls == []


def test_the_scheme_is_case_insensitive_and_passwords_may_contain_colons() -> None:
    users = {"u": bcrypt.hashpw(b"a:b", bcrypt.gensalt(COST)).decode()}
    auth = BasicAuth(users)
    encoded = base64.b64encode(b"u:a:b").decode()
    assert auth({"Authorization": f"basic {encoded}"}) is None
    assert parse_basic_authorization(f"BASIC {encoded}") == ("u", "a:b")


def test_bcrypt_runs_one_at_a_time_so_a_flood_cannot_take_every_core() -> None:
    release = threading.Event()
    inside = []
    most_inside = [0]
    lock = threading.Lock()

    def slow_verify(_password: bytes, _hashed: bytes) -> bool:
        with lock:
            inside.append(1)
            most_inside[0] = max(most_inside[0], len(inside))
        release.wait(10)
        with lock:
            inside.pop()
        return False

    auth = BasicAuth(USERS, verify=slow_verify)
    threads = [threading.Thread(target=auth, args=(header("prometheus", f"guess{n}"),)) for n in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(inside) == 1 or None, 5, "the first verification to start")
    # the others are queued on the semaphore, not verifying in parallel
    assert all(thread.is_alive() for thread in threads)
    release.set()
    for thread in threads:
        thread.join(10)
    assert most_inside[0] == 1


def test_a_cached_login_is_not_blocked_behind_a_flood_of_bad_passwords() -> None:
    release = threading.Event()
    started = threading.Event()

    def verify(password: bytes, hashed: bytes) -> bool:
        if password != b"scrape-pass":
            started.set()
            release.wait(10)
        return bool(bcrypt.checkpw(password, hashed))

    auth = BasicAuth(USERS, verify=verify)
    assert auth(header("prometheus", "scrape-pass")) is None  # verified once, now cached
    attacker = threading.Thread(target=auth, args=(header("admin", "guess"),))
    attacker.start()
    assert started.wait(5)
    try:
        assert auth(header("prometheus", "scrape-pass")) is None  # answered while bcrypt is busy
    finally:
        release.set()
        attacker.join(10)


def test_the_dummy_hash_is_a_real_bcrypt_hash_that_matches_nothing() -> None:
    hashed = dummy_hash(COST)
    assert len(hashed) == 60 and hashed.startswith(b"$2b$%02d$" % COST)
    assert bcrypt.checkpw(b"", hashed) is False  # runs bcrypt's full work, then does not match
    assert dummy_hash(COST) != hashed  # fresh salt each time


def test_a_stored_hash_bcrypt_cannot_read_lets_nobody_in() -> None:
    """The parser accepts the shape ``$2b$03$...``; bcrypt refuses cost 3: that user must not get in."""
    auth = BasicAuth({**USERS, "broken": "$2b$03$" + "a" * 53})
    assert auth(header("broken", "anything")) == REALM
    assert auth(header("prometheus", "scrape-pass")) is None


@pytest.mark.parametrize("value", [
    "Bearer " + base64.b64encode(b"prometheus:scrape-pass").decode(),  # right credentials, wrong scheme
    "Basic " + base64.b64encode(b"prometheus:scrape-pass").decode() + "!!",  # junk after the token
    "Basic " + base64.b64encode(b"prometheus:scrape-pass").decode()[:4] + "*" + base64.b64encode(
        b"prometheus:scrape-pass").decode()[4:],  # a character outside base64 inside it
])
def test_credentials_in_the_wrong_scheme_or_with_junk_are_refused(value: str) -> None:
    assert BasicAuth(USERS)({"Authorization": value}) == REALM


def test_spaces_between_the_scheme_and_the_token_are_allowed() -> None:
    token = base64.b64encode(b"prometheus:scrape-pass").decode()
    assert BasicAuth(USERS)({"Authorization": f"Basic   {token}  "}) is None


def test_a_password_of_exactly_bcrypts_72_bytes_works() -> None:
    password = "p" * 72
    auth = BasicAuth({"long": bcrypt.hashpw(password.encode(), bcrypt.gensalt(COST)).decode()})
    assert auth(header("long", password)) is None
    assert auth(header("long", password + "p")) == REALM


def test_the_cache_of_verified_logins_holds_at_most_cache_size_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full cache is emptied before the next login is remembered, so its memory stays bounded."""
    monkeypatch.setattr(auth_module, "CACHE_SIZE", 2)
    users = {name: bcrypt.hashpw(name.encode(), bcrypt.gensalt(COST)).decode() for name in ("a", "b", "c")}
    spy = Spy()
    auth = BasicAuth(users, verify=spy)
    for name in ("a", "b", "a", "c", "a"):
        assert auth(header(name, name)) is None
    # a and b fill it; a is then answered from it; c finds it full, empties it and is remembered alone,
    # so a costs a bcrypt again
    assert spy.calls == [users[name].encode() for name in ("a", "b", "c", "a")]
