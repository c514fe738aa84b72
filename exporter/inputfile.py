"""Reading a user's input file safely: a regular file, of bounded size, UTF-8 text.

Every file the exporter reads at start or on reload (``--config-file``, the counters CSV, the web
config and the certificates it names, a scenario, a kubeconfig) comes through here, so that the
same mistakes get the same one-line answer everywhere instead of a hang or a traceback:

* a FIFO, a device (``/dev/zero``), a directory or a socket is refused before anything is read:
  the file is opened non-blocking (opening a FIFO with no writer would otherwise wait forever) and
  checked with ``fstat``;
* a file larger than the limit is refused (reading stops at the limit, so a file that grows
  while being read cannot exhaust memory either);
* bytes that are not UTF-8 are refused naming the byte offset; a UTF-8 byte-order mark (as some
  Windows editors write) is dropped.

Symbolic links are followed: Kubernetes mounts ConfigMaps and Secrets as links.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DEFAULT_MAX_BYTES = 1024 * 1024
BOM = "\ufeff"


class InputFileError(Exception):
    """Why the file cannot be used; ``str()`` is one line without the path (the caller adds it)."""


def read_bytes(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The content of a regular file of at most ``max_bytes``; raises ``InputFileError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(f"not a regular file ({_kind(info.st_mode)}); give the path of a file")
        if info.st_size > max_bytes:
            raise InputFileError(f"too large ({info.st_size} bytes; at most {max_bytes})")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            try:
                chunk = os.read(fd, min(65536, max_bytes + 1 - size))
            except OSError as exc:
                raise InputFileError(f"cannot read: {exc.strerror or exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise InputFileError(f"too large (more than {max_bytes} bytes)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8, without a leading byte-order mark; raises ``InputFileError``."""
    return decode(read_bytes(path, max_bytes))


def decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"not UTF-8 text (byte {exc.start} is not valid UTF-8)") from None
    return text.removeprefix(BOM)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"
