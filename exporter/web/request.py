"""The HTTP request head a scraper sends, parsed strictly and within fixed bounds.

The listener reads bytes until the blank line that ends the head (or until ``MAX_HEAD_BYTES``, or
until its deadline), then hands them here. This is a pure function of those bytes, so it is
fuzzed on its own (tests/web/test_request_fuzz.py): any input yields a ``RequestHead`` or a
``HeadError`` carrying the status to answer (400, 405, 414, 431, 505), never another exception.

Only what an exporter needs is kept: the method, the path, the version and the headers (names
folded to lower case; repeated headers joined with ", " as RFC 9110 allows for lists). Obsolete
line folding, control characters in values, malformed names and anything that is not an HTTP/1.x
request line are refused; a missing ``Host`` is tolerated (HTTP/1.0 clients may omit it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_TARGET_BYTES = 8 * 1024

HEAD_END = b"\r\n\r\n"

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VERSION = re.compile(r"^HTTP/(\d)\.(\d)$")
# Field values: visible ASCII, spaces, tabs and obs-text (bytes 0x80-0xFF, kept as Latin-1).
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class HeadError(Exception):
    """The head cannot be served; ``status`` is the answer (400 unless more specific)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Headers(Mapping[str, str]):
    """Request headers, looked up case-insensitively (``headers.get("Authorization", "")``)."""

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items = {name.lower(): value for name, value in (items or {}).items()}

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    path: str
    version: tuple[int, int]
    headers: Headers = field(default_factory=Headers)


def parse_head(raw: bytes) -> RequestHead:
    """``raw``: the bytes up to and including the blank line (or what arrived of them)."""
    if len(raw) > MAX_HEAD_BYTES:
        raise HeadError(431, "request head too large")
    text = raw.decode("latin-1")
    head, _, _ = text.partition("\r\n\r\n")
    lines = head.split("\r\n")
    request_line = lines[0]
    while request_line == "" and len(lines) > 1:  # RFC 9112 2.2: ignore empty lines before the request line
        lines = lines[1:]
        request_line = lines[0]
    parts = request_line.split(" ")
    if len(parts) != 3:
        raise HeadError(400, "malformed request line")
    method, target, version_text = parts
    if not _TOKEN.match(method):
        raise HeadError(400, "malformed method")
    version_match = _VERSION.match(version_text)
    if version_match is None:
        raise HeadError(400, "malformed HTTP version")
    version = (int(version_match.group(1)), int(version_match.group(2)))
    if version[0] != 1:
        raise HeadError(505, "only HTTP/1.x is served")
    if len(target) > MAX_TARGET_BYTES:
        raise HeadError(414, "request target too long")
    path = _path_of(target)
    headers: dict[str, str] = {}
    count = 0
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t":
            raise HeadError(400, "obsolete line folding is not accepted")
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name):
            raise HeadError(400, "malformed header line")
        value = value.strip(" \t")
        if _BAD_VALUE.search(value):
            raise HeadError(400, "control character in a header value")
        count += 1
        if count > MAX_HEADERS:
            raise HeadError(431, "too many header fields")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return RequestHead(method=method, target=target, path=path, version=version, headers=Headers(headers))


def _path_of(target: str) -> str:
    """The path of an origin-form (``/metrics?x``) or absolute-form (``http://h/metrics``) target."""
    if target.startswith("/"):
        return target.split("?", 1)[0]
    if target == "*":
        return "*"
    scheme, sep, rest = target.partition("://")
    if sep and scheme.lower() in ("http", "https"):
        slash = rest.find("/")
        return "/" if slash < 0 else rest[slash:].split("?", 1)[0]
    raise HeadError(400, "malformed request target")
