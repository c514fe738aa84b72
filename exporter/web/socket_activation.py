"""``--web-systemd-socket``: serve on the listening socket systemd passes (socket activation).

systemd's protocol (sd_listen_fds(3)): the activated process finds ``LISTEN_FDS`` (how many sockets)
and ``LISTEN_PID`` (its own pid) in its environment, and the sockets as file descriptors from 3 on,
already bound and listening. dcgm-exporter takes them through the Prometheus exporter-toolkit
(``DCGM_EXPORTER_SYSTEMD_SOCKET``). This module only answers "where does the listening socket come
from": it returns that socket, and the HTTP server serves on it instead of binding ``--address``.
Everything else (TLS and basic auth from the web config, the bounded worker pool) is unchanged.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping

from exporter.logs import get_logger
from exporter.options import ConfigError

LOG = get_logger("web")

LISTEN_FDS_START = 3
_VARIABLES = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")


def _error(message: str) -> ConfigError:
    return ConfigError("flag --web-systemd-socket", "web-systemd-socket", message)


def inherited_socket(environ: MutableMapping[str, str] | None = None, pid: int | None = None) -> socket.socket:
    """The first socket systemd passed; ``ConfigError`` (exit 2) when there is none to take.

    The ``LISTEN_*`` variables are removed afterwards, as ``sd_listen_fds(1)`` does, so nothing this
    process starts believes the sockets are its own.
    """
    env = os.environ if environ is None else environ
    count_text = env.get("LISTEN_FDS", "")
    if not count_text:
        raise _error("no socket was passed (LISTEN_FDS is not set): start the exporter from a systemd "
                     ".socket unit, or leave the flag out to listen on --address")
    owner = env.get("LISTEN_PID", "")
    if owner and owner != str(os.getpid() if pid is None else pid):
        raise _error(f"the sockets were passed to process {owner}, not to this one (LISTEN_PID); "
                     "use ExecStart= without a wrapper that forks")
    try:
        count = int(count_text)
    except ValueError:
        raise _error(f"LISTEN_FDS={count_text!r} is not a number") from None
    if count < 1:
        raise _error("LISTEN_FDS says no socket was passed")
    try:
        listener = socket.socket(fileno=LISTEN_FDS_START)
    except OSError as exc:
        raise _error(f"file descriptor {LISTEN_FDS_START} is not a socket: {exc.strerror or exc}") from None
    if listener.type != socket.SOCK_STREAM or not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        listener.detach()
        raise _error(f"file descriptor {LISTEN_FDS_START} is not a listening stream socket "
                     "(the .socket unit needs ListenStream=)")
    listener.set_inheritable(False)
    if count > 1:
        LOG.warning("systemd passed %d sockets; serving on the first (%s) only", count, listener.getsockname())
    for name in _VARIABLES:
        env.pop(name, None)
    return listener
