"""The command-line flags that say how to reach and authenticate to a server, shared by ``report``,
``report quota`` and ``top`` (Prometheus and ``--exporter`` alike): one spelling and one meaning.

Secrets never travel on the command line (where ``ps`` and shell history see them): a bearer token
and a basic-auth password come from files, or the password is asked for with ``getpass`` when the
command runs in a terminal and allows it (``top``). Every mistake is a ``FlagError`` naming its flag.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from exporter.prometheus.client import Connection

T = TypeVar("T")

class FlagError(ValueError):
    """A flag's value is wrong; the message starts with the flag."""


class OneLineParser(argparse.ArgumentParser):
    """argparse's own mistakes (``--top-pods x``, an unknown flag) as a FlagError: the command prints one
    line naming the flag, as for every other mistake, instead of the whole usage."""

    def error(self, message: str) -> NoReturn:
        raise FlagError(message.removeprefix("argument "))


def add_security_arguments(group: argparse._ArgumentGroup, *, password_prompt: bool = False) -> None:
    """``--tenant --header --bearer-token-file --basic-auth-user --basic-auth-password-file --ca-file
    --insecure-skip-verify`` on ``group``; ``password_prompt``: the command asks for a missing password."""
    group.add_argument("--tenant", metavar="ID", help="Tenant for Mimir/Cortex/Thanos (X-Scope-OrgID header).")
    group.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                       help="Extra HTTP header (repeatable).")
    group.add_argument("--bearer-token-file", metavar="FILE", help="File holding a bearer token.")
    group.add_argument("--basic-auth-user", metavar="USER",
                       help="Basic-auth user (password from --basic-auth-password-file"
                            + (", else asked for in a terminal)." if password_prompt else ")."))
    group.add_argument("--basic-auth-password-file", metavar="FILE", help="File holding the basic-auth password.")
    group.add_argument("--ca-file", metavar="FILE", help="CA certificates to verify the server with.")
    group.add_argument("--insecure-skip-verify", action="store_true", help="Do not verify the server's certificate.")


def read_secret(path: str, flag: str) -> str:
    """The content of a secret file (stripped); FlagError naming ``flag`` when unreadable or empty."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise FlagError(f"{flag} {path}: {error.strerror or error}") from None
    if not value:
        raise FlagError(f"{flag} {path}: the file is empty")
    return value


def parse_headers(values: Sequence[str]) -> dict[str, str]:
    """``--header 'Name: value'`` (or ``Name=value``) values as a mapping."""
    headers = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep:
            name, sep, content = value.partition("=")
        if not sep or not name.strip() or any(c in name for c in " \r\n") or any(c in content for c in "\r\n"):
            raise FlagError(f"--header {value!r}: expected 'Name: value'")
        headers[name.strip()] = content.strip()
    return headers


def secured(args: argparse.Namespace, *, prompt: Callable[[str], str] | None = None,
            **settings: Any) -> Callable[[str], Connection]:
    """The security flags checked and their secrets read (once), as a maker of ``Connection`` to a URL
    with those credentials and TLS settings and ``settings`` (timeout, retries, ...).

    ``prompt`` (``getpass.getpass`` in a terminal): how to ask for the password of ``--basic-auth-user``
    given without ``--basic-auth-password-file``; None: the two flags go together.
    """
    if args.basic_auth_password_file is not None and args.basic_auth_user is None:
        raise FlagError("--basic-auth-password-file needs --basic-auth-user")
    if args.basic_auth_user is not None and args.basic_auth_password_file is None and prompt is None:
        raise FlagError("--basic-auth-user and --basic-auth-password-file go together")
    if args.bearer_token_file and args.basic_auth_user:
        raise FlagError("give either --bearer-token-file or basic auth, not both")
    if args.ca_file and not Path(args.ca_file).is_file():
        raise FlagError(f"--ca-file {args.ca_file}: no such file")
    if args.ca_file and args.insecure_skip_verify:
        raise FlagError("give either --ca-file or --insecure-skip-verify, not both")
    basic = None
    if args.basic_auth_user is not None:
        if args.basic_auth_password_file is not None:
            password = read_secret(args.basic_auth_password_file, "--basic-auth-password-file")
        else:
            assert prompt is not None
            password = prompt(f"password of {args.basic_auth_user}: ")
        basic = (args.basic_auth_user, password)
    token = read_secret(args.bearer_token_file, "--bearer-token-file") if args.bearer_token_file else None
    return functools.partial(Connection, headers=parse_headers(args.header), tenant=args.tenant, basic_auth=basic,
                             bearer_token=token, ca_file=args.ca_file, insecure_skip_verify=args.insecure_skip_verify,
                             **settings)


def flag_value(flag: str, text: str, parse: Callable[[str], T]) -> T:
    """``parse(text)``; its ValueError as a FlagError that names ``flag`` (``--range: invalid duration '0s'...``)."""
    try:
        return parse(text)
    except ValueError as error:
        raise FlagError(f"{flag}: {error}") from None
