"""The HTTP listener: /metrics from the exposition cache, /health, and the live node page (/, /gpus.json).

No client can make another wait. Every connection lives on one asyncio event loop (standard
library, one thread), so an idle, slow or malicious connection costs a file descriptor and a few
KiB, never a worker that others queue behind (the thread-pool server this replaced stopped every
scrape with 32 idle sockets). What bounds each connection:

* **deadlines**: the TLS handshake and the whole request head must each finish within
  ``HANDSHAKE_TIMEOUT_S`` / ``HEAD_TIMEOUT_S`` (a slowloris client sending a byte every few seconds
  is cut, however steadily it sends), and writing the response within ``WRITE_TIMEOUT_S``;
* **memory**: the head is read up to ``MAX_HEAD_BYTES``; a response is written in chunks only as
  fast as the client reads (flow control), so a slow reader holds a reference to the cached
  exposition plus one chunk, not a copy of it;
* **a cap on open connections** (``--web-max-connections``): at the cap, the connection that has
  waited longest without sending a complete request is closed to make room; when every open
  connection is being answered, new ones wait in the kernel's listen backlog;
* **bcrypt off the loop**: credentials verified before are answered from the cache at once; new
  ones are verified in a one-thread pool (bcrypt is slow on purpose) behind a bounded queue, and
  past it the request gets 429 without any bcrypt work, so a flood of wrong passwords never delays
  a scrape whose credentials are known good.

A scrape does no I/O besides the socket: it picks the cached bytes for the negotiated format
(OpenMetrics or text 0.0.4, gzip or not; ``exporter.metrics.exposition.wants_openmetrics`` keeps
dcgm-exporter's counters typed ``counter``) and writes them. Connections close after each response
(HTTP/1.0 semantics): Prometheus reconnects cheaply, and nothing sits in keep-alive.
Connection-level trouble (handshakes that fail, heads that never finish, evictions) is logged at
most once per kind per minute with a count, so no client can flood the log.

Why asyncio streams of the standard library and not aiohttp: measured with ``python -m bench.servers``
(docs/benchmarks.md, "Serving under attack"), aiohttp costs more memory per process and more CPU
per scrape for the same bytes, and has no deadline for the request head.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import logging
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from exporter import __version__
from exporter.logs import RateLimitedLog, get_logger
from exporter.metrics.exposition import wants_openmetrics
from exporter.web.cache import ExpositionCache, node_view_json
from exporter.web.health import HealthReport
from exporter.web.nodepage import PAGE_HEADERS, load_assets
from exporter.web.request import HEAD_END, MAX_HEAD_BYTES, HeadError, RequestHead, parse_head

log = get_logger("web")

HEAD_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 1024
# File descriptors the process needs besides client connections (kubelet, API server, files, NVML).
RESERVED_FDS = 128
AUTH_WORKERS = 1  # bcrypt one at a time, as exporter-toolkit's mutex: it cannot take every core
AUTH_QUEUE = 32  # verifications waiting for the pool; beyond that: 429 without bcrypt
CHUNK_BYTES = 64 * 1024
WRITE_HIGH_WATER = 256 * 1024
NOISE_INTERVAL_S = 60.0
LISTEN_BACKLOG = 1024

Decision = str | None | Callable[[], str | None]


class WebSecurity:
    """What the listener asks about each connection and request; this base is plain HTTP, open to all.

    ``exporter.web.security.FileWebSecurity`` implements it from the exporter-toolkit web config.
    Every method except ``decide``'s returned job runs on the event loop: none may block.
    """

    def ssl_context(self) -> ssl.SSLContext | None:
        """Per connection: the context to wrap it in (the current one after a reload); None = HTTP."""
        return None

    def peer_allowed(self, connection: ssl.SSLObject | ssl.SSLSocket) -> bool:
        """After the TLS handshake: may this client (its verified certificate) talk to us?"""
        return True

    def allow_request(self) -> bool:
        """Rate limit: False answers 429 before any authentication work."""
        return True

    def authenticate(self, headers: Any) -> str | None:
        """None to allow, else the realm for a 401 (``headers``: case-insensitive ``get``)."""
        return None

    def decide(self, headers: Any) -> Decision:
        """Like ``authenticate``, or a job to run off the loop (bcrypt) that returns what it would."""
        return self.authenticate(headers)

    def headers(self) -> Mapping[str, str]:
        """Extra headers for every response (http_server_config.headers)."""
        return {}

    def start(self) -> None:
        """Begin watching the configuration for changes (a background thread), if there is one."""

    def stop(self) -> None:
        """Stop what ``start`` began."""


_PLAIN_HTTP_BODY = b"Client sent an HTTP request to an HTTPS server; use https://.\n"
PLAIN_HTTP_TO_TLS_PORT = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                          b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_PLAIN_HTTP_BODY),
                                                                                   _PLAIN_HTTP_BODY))
TLS_HANDSHAKE_RECORD = 0x16


def parse_address(address: str) -> tuple[str, int]:
    """``:9400`` -> ("", 9400); ``[::1]:9400`` -> ("::1", 9400); ``127.0.0.1:0`` -> ("127.0.0.1", 0)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def accepts_gzip(accept_encoding: str) -> bool:
    for part in accept_encoding.split(","):
        coding, *params = (piece.strip() for piece in part.split(";"))
        if coding.lower() in {"gzip", "*"}:
            return not any(param.replace(" ", "") in {"q=0", "q=0.0", "q=0.00", "q=0.000"} for param in params)
    return False


_SERVER_HEADER = f"gpu-pod-exporter/{__version__}"
_TEXT = "text/plain; charset=utf-8"


def raise_file_limit(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (within the hard limit); the soft limit after.

    Many distributions start processes with a soft limit of 1024 file descriptors; a listener that
    keeps up to ``--web-max-connections`` sockets open needs more. Raising the soft limit up to the
    hard one needs no privilege.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted if soft == resource.RLIM_INFINITY else soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


class _Connection(asyncio.Protocol):
    """One client connection: handshake (TLS) -> head -> busy (auth) -> writing -> closed.

    TLS runs here on memory BIOs (``SSLContext.wrap_bio``) rather than in asyncio's SSL transport,
    whose 256 KiB read buffer per connection would make a thousand open TLS connections cost
    256 MiB; here a connection holds only what is in flight. It also lets the first byte decide:
    a TLS handshake record, or a plain-HTTP request on the TLS port (answered with a readable 400).
    """

    def __init__(self, server: EventLoopHTTPServer, peer: str, context: ssl.SSLContext | None) -> None:
        self.server = server
        self.peer = peer
        self.state = "opening"
        self.transport: asyncio.Transport | None = None
        self.plain_on_tls_port = False
        self._context = context
        self._tls: ssl.SSLObject | None = None
        self._incoming: ssl.MemoryBIO | None = None
        self._outgoing: ssl.MemoryBIO | None = None
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._body = memoryview(b"")
        self._offset = 0
        self._paused = False
        self._body_length = 0
        self._body_done: Callable[[bytes], None] = _ignore

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.state == "closed":  # evicted while opening
            transport.abort()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if self._context is not None:
            self.state = "handshake"
            self.arm(self.server.handshake_timeout_s, "handshake-timeout",
                     "a client did not complete the TLS handshake in time")
        else:
            self._reading_head()

    def data_received(self, data: bytes) -> None:
        if self.state == "handshake":
            self._tls_data(data)
        elif self.state in ("head", "body"):
            if self._tls is not None:
                self._tls_data(data)
            elif self.state == "head":
                self._head_data(data)
            else:
                self._body_data(data)
        # anything after the head (or the body a server asked for) is not read: we close after answering

    def eof_received(self) -> bool:
        # A client may shut down its sending side right after the request (HTTP/1.0 style, `nc -N`):
        # keep the connection open to answer it. Before a complete head, the connection just closes.
        return self.state in ("busy", "writing")

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = "closed"
        self._disarm()
        self._body = memoryview(b"")
        self._tls = self._incoming = self._outgoing = None
        self.server.forget(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._pump()

    # -- reading ------------------------------------------------------------------------------------

    def _reading_head(self) -> None:
        self.state = "head"
        self.arm(self.server.read_timeout_s, "head-timeout", "a client did not send a complete request head in time")

    def _head_data(self, data: bytes) -> None:
        self._buffer += data
        end = self._buffer.find(HEAD_END)
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                self.server.handle(self, bytes(self._buffer[:MAX_HEAD_BYTES + 1]))
            return
        raw = bytes(self._buffer[:end + len(HEAD_END)])
        del self._buffer[:end + len(HEAD_END)]  # what follows is the start of a body, if one is read
        self.server.handle(self, raw)

    def read_body(self, length: int, done: Callable[[bytes], None]) -> None:
        """Read ``length`` bytes of request body within the read deadline, then ``done(body)``."""
        self.state = "body"
        self._body_length = length
        self._body_done = done
        self.arm(self.server.read_timeout_s, "body-timeout", "a client did not send its request body in time")
        if self.transport is not None:
            self.transport.resume_reading()
        if self._tls is not None:
            self._tls_data(b"")  # what arrived with the head may wait, decrypted or not, in the TLS object
        else:
            self._body_data(b"")

    def _body_data(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) < self._body_length:
            return
        body = bytes(self._buffer[:self._body_length])
        self._buffer = bytearray()
        self.state = "busy"
        self._disarm()
        self._body_done(body)

    def _tls_data(self, data: bytes) -> None:
        if self._tls is None:
            assert self._context is not None
            if data[0] != TLS_HANDSHAKE_RECORD:
                if data[:1].isalpha():
                    self.plain_on_tls_port = True
                    self._reading_head()
                    self._head_data(data)
                else:
                    self.server.noise("not-tls", "a client sent something other than TLS to the TLS port",
                                      client=self.peer)
                    self.close_now()
                return
            self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            self._tls = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        assert self._incoming is not None
        self._incoming.write(data)
        try:
            if self.state == "handshake":
                try:
                    self._tls.do_handshake()
                except ssl.SSLWantReadError:
                    return
                finally:
                    self._flush_tls()
                if not self.server.security.peer_allowed(self._tls):
                    self.server.noise("peer-not-allowed", "client certificate not allowed (client_allowed_sans)",
                                      client=self.peer)
                    self.close_now()
                    return
                self._reading_head()
            while self.state in ("head", "body") and self._tls is not None:
                try:
                    chunk = self._tls.read(16384)
                except ssl.SSLWantReadError:
                    break
                if not chunk:
                    break
                if self.state == "head":
                    self._head_data(chunk)
                else:
                    self._body_data(chunk)
            self._flush_tls()
        except (ssl.SSLError, OSError) as exc:  # a failed handshake, a bad record, a close_notify
            if not isinstance(exc, ssl.SSLZeroReturnError):
                kind = "handshake-failed" if self.state == "handshake" else "tls-error"
                self.server.noise(kind, "TLS failed", client=self.peer, error=_short(exc))
            self._flush_tls()
            self.close_now(graceful=True)

    def _flush_tls(self) -> None:
        if self._outgoing is not None and self._outgoing.pending and self.transport is not None:
            self.transport.write(self._outgoing.read())

    # -- writing ------------------------------------------------------------------------------------

    def busy(self) -> None:
        """The head is complete: no longer idle, no head deadline. A server that reads bodies gets the
        rest later (``read_body``): until then the socket is not read, so the kernel holds what the client
        sends on (flow control), not our memory."""
        self.state = "busy"
        self._disarm()
        self.server.not_idle(self)
        if self.server.max_body_bytes and self.transport is not None:
            self.transport.pause_reading()

    def send(self, head: bytes, body: bytes) -> None:
        """Write the response and close; at most ``WRITE_TIMEOUT_S`` for all of it."""
        transport = self.transport
        if self.state == "closed" or transport is None or transport.is_closing():
            return
        self.state = "writing"
        self.arm(self.server.write_timeout_s, "write-timeout", "a client did not read its response in time")
        if len(body) <= CHUNK_BYTES:
            self._write(head + body)
            self._finish()
            return
        self._write(head)
        self._body = memoryview(body)
        self._offset = 0
        self._pump()

    def _write(self, data: bytes | memoryview) -> None:
        assert self.transport is not None
        if self._tls is None:
            self.transport.write(data)
            return
        self._tls.write(data)
        self._flush_tls()

    def _pump(self) -> None:
        if self.state != "writing" or self.transport is None:
            return
        while self._offset < len(self._body) and not self._paused:
            self._write(self._body[self._offset:self._offset + CHUNK_BYTES])
            self._offset += CHUNK_BYTES
        if self._offset >= len(self._body):
            self._body = memoryview(b"")
            self._finish()

    def _finish(self) -> None:
        if self._tls is not None:
            with contextlib.suppress(ssl.SSLError, OSError):
                self._tls.unwrap()  # queue our close_notify; the client's reply is not waited for
            self._flush_tls()
        if self.transport is not None:
            self.transport.close()  # flushes what is buffered, then connection_lost

    def close_now(self, *, graceful: bool = False) -> None:
        """Close at once (evicted, timed out, refused, shutting down); ``graceful`` lets a TLS alert out."""
        self.state = "closed"
        self._disarm()
        if self.transport is not None:
            if graceful:
                self.transport.close()
            else:
                self.transport.abort()
        self.server.forget(self)

    def arm(self, seconds: float, kind: str, message: str) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(seconds, self._expired, kind, message)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, kind: str, message: str) -> None:
        self._timer = None
        if self.state != "closed":
            self.server.noise(kind, message, client=self.peer)
            self.close_now()


@dataclass(frozen=True)
class Response:
    """What a server's ``answer`` (or a job it runs off the loop) sends back."""

    status: int
    body: bytes
    content_type: str = _TEXT
    extra: Mapping[str, str] = field(default_factory=dict)


class EventLoopHTTPServer:
    """The serving core every listener of this package shares: the exporter's ``/metrics`` and the
    remediator's Alertmanager webhook.

    It owns the listening socket, the event-loop thread, the connection cap, the deadlines, the
    bounded bcrypt pool and the rate-limited connection log; a subclass says which methods it takes,
    who may ask (``decide``), whether a request carries a body worth reading, and what to answer
    (``answer``). Work that may block (anything taking a lock another thread holds across I/O) goes
    to a pool through ``answer_later``: the loop itself only moves bytes.
    """

    methods: tuple[str, ...] = ("GET", "HEAD")
    max_body_bytes = 0
    server_header = _SERVER_HEADER

    def __init__(self, address: str, security: WebSecurity | None = None, *,
                 listener: socket.socket | None = None, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 read_timeout_s: float | None = None, write_timeout_s: float | None = None,
                 logger: logging.Logger | None = None, thread_name: str = "http-server") -> None:
        # --web-read-timeout / --web-write-timeout (dcgm-exporter 4.8.3's flags): the handshake and
        # request head must arrive within the first, the response must be read within the second.
        # None: the module's defaults, looked up now (tests shorten them).
        self.handshake_timeout_s = HANDSHAKE_TIMEOUT_S if read_timeout_s is None else read_timeout_s
        self.read_timeout_s = HEAD_TIMEOUT_S if read_timeout_s is None else read_timeout_s
        self.write_timeout_s = WRITE_TIMEOUT_S if write_timeout_s is None else write_timeout_s
        self.security = security or WebSecurity()
        self._log = logger or log
        self._thread_name = thread_name
        limit = raise_file_limit(max_connections + RESERVED_FDS)
        self.max_connections = max(1, min(max_connections, limit - RESERVED_FDS))
        if self.max_connections < max_connections:
            self._log.warning("the open-file limit allows fewer client connections than asked for",
                              extra={"fields": {"max_connections": self.max_connections, "asked": max_connections,
                                                "nofile_limit": limit}})
        # ``listener``: already bound and listening (--web-systemd-socket: exporter.web.socket_activation).
        self._listener = _listen(address) if listener is None else listener
        self._listener.setblocking(False)
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_exception)
        self._auth_pool = ThreadPoolExecutor(max_workers=AUTH_WORKERS, thread_name_prefix=f"{thread_name}-auth")
        self._auth_waiting = 0
        self._open: dict[_Connection, None] = {}  # insertion order: oldest first
        self._idle: dict[_Connection, None] = {}  # opening or reading the head, oldest first
        self._room: asyncio.Event | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._noise = RateLimitedLog(self._log, NOISE_INTERVAL_S)
        self._date = ("", -1)
        self.evicted = 0

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def open_connections(self) -> int:
        return len(self._open)

    # -- what a subclass decides ----------------------------------------------------------------------

    def guarded(self, head: RequestHead) -> bool:
        """Do the rate limit and authentication apply to this request? (a probe's path may be exempt)"""
        return True

    def decide(self, head: RequestHead) -> Decision:
        """None to allow, a realm to refuse (401), or a job to run off the loop that returns one of those."""
        return self.security.decide(head.headers)

    def challenge(self, realm: str) -> str:
        """The ``WWW-Authenticate`` value of a 401."""
        return f'Basic realm="{realm}", charset="UTF-8"'

    def refused(self, reason: str) -> None:
        """A request was refused before ``answer``: rate_limited, unauthorized, length_required, too_large."""

    def wants_body(self, head: RequestHead) -> bool:
        """Read this request's body (``Content-Length``, at most ``max_body_bytes``) before ``answer``?"""
        return False

    def answer(self, connection: _Connection, head: RequestHead, body: bytes) -> None:
        """Answer an admitted request (on the loop: never block; use ``answer_later`` for work)."""
        raise NotImplementedError

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        self.security.start()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), name=self._thread_name, daemon=True)
        self._thread.start()
        started.wait(10)

    def _serve(self, started: threading.Event) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        self._room = asyncio.Event()
        self._accepting = loop.create_task(self._accept_forever())
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    def stop(self) -> None:
        self.security.stop()
        if self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._shutdown)
            self._thread.join(5)
        self._listener.close()
        self._auth_pool.shutdown(wait=False, cancel_futures=True)

    def _shutdown(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        for connection in list(self._open):
            connection.close_now()
        self._loop.stop()

    # -- accepting ----------------------------------------------------------------------------------

    async def _accept_forever(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._room is not None
        while True:
            if len(self._open) >= self.max_connections and not self._idle:
                self._room.clear()
                await self._room.wait()  # every slot is answering someone: let the backlog hold the rest
                continue
            try:
                sock, peer = await loop.sock_accept(self._listener)
            except OSError as exc:  # EMFILE/ENFILE/ENOBUFS: the kernel is out of something; let it recover
                self.noise("accept-failed", "accepting a connection failed", error=exc.strerror or str(exc))
                await asyncio.sleep(0.1)
                continue
            if len(self._open) >= self.max_connections:
                self._evict_oldest_idle()
            connection = _Connection(self, str(peer[0]) if isinstance(peer, tuple) and peer else "",
                                     self.security.ssl_context())
            self._open[connection] = None
            self._idle[connection] = None
            try:
                await loop.connect_accepted_socket(lambda: connection, sock)  # noqa: B023 - used at once
            except OSError as exc:
                self.noise("accept-failed", "setting up a connection failed", error=exc.strerror or str(exc))
                sock.close()
                self.forget(connection)

    def _evict_oldest_idle(self) -> bool:
        for oldest in self._idle:
            self.evicted += 1
            self.noise("evicted", "connection cap reached: closed the oldest connection that had not sent a "
                       "request", client=oldest.peer, max_connections=self.max_connections)
            oldest.close_now()
            return True
        return False

    def not_idle(self, connection: _Connection) -> None:
        self._idle.pop(connection, None)

    def forget(self, connection: _Connection) -> None:
        self._idle.pop(connection, None)
        if self._open.pop(connection, 0) is None and self._room is not None:
            self._room.set()

    # -- requests -----------------------------------------------------------------------------------

    def handle(self, connection: _Connection, raw: bytes) -> None:
        """A complete request head arrived (or too many bytes without one)."""
        connection.busy()
        if connection.plain_on_tls_port:
            self.noise("plain-http-on-tls", "plain HTTP request on the TLS port refused", client=connection.peer)
            connection.send(PLAIN_HTTP_TO_TLS_PORT, b"")
            return
        try:
            head = parse_head(raw)
        except HeadError as exc:
            self.noise("bad-request", "malformed request refused", client=connection.peer, error=exc.message)
            self._send(connection, exc.status, _TEXT, f"{http.HTTPStatus(exc.status).phrase}\n".encode())
            return
        try:
            self._authorize(connection, head)
        except Exception:  # noqa: BLE001 - a bug: answer 500 and say so, at most once a minute
            self.noise("internal-error", "answering a request failed", exc_info=True)
            self._send(connection, 500, _TEXT, b"Internal Server Error\n")

    def _authorize(self, connection: _Connection, head: RequestHead) -> None:
        head_only = head.method == "HEAD"
        if head.method not in self.methods:
            self._send(connection, 405, _TEXT, b"method not allowed\n", extra={"Allow": ", ".join(self.methods)})
            return
        if not self.guarded(head):
            self._admitted(connection, head, None)
            return
        if not self.security.allow_request():
            self.refused("rate_limited")
            self._send(connection, 429, _TEXT, b"Too Many Requests\n", head_only=head_only)
            return
        decision = self.decide(head)
        if not callable(decision):
            self._admitted(connection, head, decision)
            return
        if self._auth_waiting >= AUTH_QUEUE:
            self.noise("auth-queue-full", "too many password checks waiting; answered 429 without checking",
                       client=connection.peer)
            self.refused("rate_limited")
            self._send(connection, 429, _TEXT, b"Too Many Requests\n", head_only=head_only,
                       extra={"Retry-After": "1"})
            return
        self._auth_waiting += 1
        job = decision

        def verify() -> str | None:
            if connection.state == "closed":
                return "gone"  # the client left while waiting: skip the bcrypt work
            return job()

        future = self._loop.run_in_executor(self._auth_pool, verify)
        future.add_done_callback(lambda done: self._verified(connection, head, done))

    def _verified(self, connection: _Connection, head: RequestHead, done: asyncio.Future[str | None]) -> None:
        self._auth_waiting -= 1
        if connection.state == "closed" or done.cancelled():
            return
        error = done.exception()
        if error is not None:
            self.noise("internal-error", "password check failed", error=_short(error))
            self._send(connection, 500, _TEXT, b"Internal Server Error\n")
            return
        self._admitted(connection, head, done.result())

    def _admitted(self, connection: _Connection, head: RequestHead, realm: str | None) -> None:
        """Authorized (or refused with ``realm``); read the body when one is wanted, then ``answer``."""
        if realm is not None:
            self.refused("unauthorized")
            self._send(connection, 401, _TEXT, b"Unauthorized\n", head_only=head.method == "HEAD",
                       extra={"WWW-Authenticate": self.challenge(realm)})
            return
        if not self.wants_body(head):
            self.answer(connection, head, b"")
            return
        length = head.headers.get("Content-Length", "")
        if not length.isdigit():
            self.refused("length_required")
            self._send(connection, 411, _TEXT, b"Content-Length required\n")
            return
        if int(length) > self.max_body_bytes:
            self.refused("too_large")
            self._send(connection, 413, _TEXT, f"body larger than {self.max_body_bytes} bytes\n".encode())
            return

        def read(body: bytes) -> None:
            try:
                self.answer(connection, head, body)
            except Exception:  # noqa: BLE001 - as in handle(): a bug answers 500
                self.noise("internal-error", "answering a request failed", exc_info=True)
                self._send(connection, 500, _TEXT, b"Internal Server Error\n")

        connection.read_body(int(length), read)

    def answer_later(self, pool: ThreadPoolExecutor, connection: _Connection, head: RequestHead,
                     job: Callable[[], Response]) -> None:
        """Run ``job`` in ``pool`` (off the loop) and send the ``Response`` it returns."""

        def done(future: asyncio.Future[Response]) -> None:
            if connection.state == "closed" or future.cancelled():
                return
            error = future.exception()
            if error is not None:
                self.noise("internal-error", "answering a request failed", error=_short(error))
                self._send(connection, 500, _TEXT, b"Internal Server Error\n")
                return
            self.respond(connection, head, future.result())

        self._loop.run_in_executor(pool, job).add_done_callback(done)

    def respond(self, connection: _Connection, head: RequestHead, response: Response) -> None:
        self._send(connection, response.status, response.content_type, response.body,
                   head_only=head.method == "HEAD", extra=response.extra)

    def _send(self, connection: _Connection, status: int, content_type: str, body: bytes, *,
              head_only: bool = False, extra: Mapping[str, str] | None = None) -> None:
        lines = [f"HTTP/1.0 {status} {http.HTTPStatus(status).phrase}", f"Server: {self.server_header}",
                 f"Date: {self._http_date()}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        for name, value in {**self.security.headers(), **(extra or {})}.items():
            lines.append(f"{name}: {value}")
        lines.append("Connection: close")
        text = "\r\n".join(lines) + "\r\n\r\n"
        try:
            head = text.encode("latin-1")
        except UnicodeEncodeError:  # the web config validates header values; never serve a broken head
            self.noise("header-encoding", "a response header is not Latin-1; sent without the configured headers")
            head = text.encode("latin-1", "replace")
        connection.send(head, b"" if head_only else body)

    def _http_date(self) -> str:
        now = int(self._loop.time())
        if self._date[1] != now:
            self._date = (email.utils.formatdate(usegmt=True), now)
        return self._date[0]

    # -- logging ------------------------------------------------------------------------------------

    def noise(self, kind: str, message: str, *, exc_info: bool = False, **fields: Any) -> None:
        """Connection-level trouble: one line per kind per minute, with the count."""
        if exc_info:
            if self._noise.event(kind, logging.ERROR, message, **fields):
                self._log.debug("details of the last %s", kind, exc_info=True)
            return
        self._noise.event(kind, logging.WARNING, message, **fields)

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        self.noise("loop-error", str(context.get("message", "event loop error")),
                   error=_short(error) if error is not None else "")


class ExporterHTTPServer(EventLoopHTTPServer):
    """The exporter's listener: /metrics from the exposition cache, /health, the node page."""

    def __init__(self, address: str, cache: ExpositionCache, health: Callable[[], HealthReport],
                 security: WebSecurity | None = None, *,
                 listener: socket.socket | None = None, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 read_timeout_s: float | None = None, write_timeout_s: float | None = None,
                 sampling_interval_s: float | None = None) -> None:
        super().__init__(address, security, listener=listener, max_connections=max_connections,
                         read_timeout_s=read_timeout_s, write_timeout_s=write_timeout_s)
        self.cache = cache
        self.health = health
        self.sampling_interval_s = sampling_interval_s  # /gpus.json: the bound after which its data is stale
        # Builds /gpus.json (once per exposition generation) off the loop, so a page never delays a scrape.
        self._page_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="http-page")
        self._page = load_assets()

    def stop(self) -> None:
        super().stop()
        self._page_pool.shutdown(wait=False, cancel_futures=True)

    def answer(self, connection: _Connection, head: RequestHead, body: bytes) -> None:
        head_only = head.method == "HEAD"
        path = head.path
        if path == "/metrics":
            exposition = self.cache.current
            openmetrics = wants_openmetrics(head.headers.get("Accept", ""),
                                            counters_need_text=exposition.counters_need_text)
            compressed = accepts_gzip(head.headers.get("Accept-Encoding", ""))
            payload = exposition.body(openmetrics, compressed)
            extra = {"Vary": "Accept, Accept-Encoding"}
            if compressed:
                extra["Content-Encoding"] = "gzip"
            self._send(connection, 200, exposition.content_type(openmetrics), payload, head_only=head_only,
                       extra=extra)
        elif path in {"/health", "/healthz"}:
            report = self.health()
            self._send(connection, 200 if report.healthy else 503, _TEXT, (report.reason + "\n").encode("utf-8"),
                       head_only=head_only)
        elif path == "/":
            page = self._page.page(__version__, self.health().reason)
            self._send(connection, 200, "text/html; charset=utf-8", page, head_only=head_only, extra=PAGE_HEADERS)
        elif path in self._page.static:
            content_type, static = self._page.static[path]
            self._send(connection, 200, content_type, static, head_only=head_only, extra=PAGE_HEADERS)
        elif path == "/gpus.json":
            self._node_view(connection, head)
        else:
            self._send(connection, 404, _TEXT, b"not found; try /, /metrics, /gpus.json or /health\n",
                       head_only=head_only)

    def _node_view(self, connection: _Connection, head: RequestHead) -> None:
        """Answer /gpus.json: from memory when this generation's view exists, else built in the page pool."""
        exposition = self.cache.current
        ready = exposition.node_view_ready
        if ready is not None:
            body = node_view_json(ready, time.time(), self.sampling_interval_s)
            self.respond(connection, head, Response(200, body, "application/json", PAGE_HEADERS))
            return
        self.answer_later(self._page_pool, connection, head, lambda: Response(
            200, node_view_json(exposition.node_view(__version__), time.time(), self.sampling_interval_s),
            "application/json", PAGE_HEADERS))


def _ignore(body: bytes) -> None:
    """The body callback of a connection that has not asked for a body."""



def _short(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _listen(address: str) -> socket.socket:
    host, port = parse_address(address)
    family = socket.AF_INET6 if (":" in host or host == "") and socket.has_ipv6 else socket.AF_INET
    bind_host = host if host else ("::" if family == socket.AF_INET6 else "0.0.0.0")  # noqa: S104 - ":9400" means all
    try:
        return _bound(family, bind_host, port)
    except OSError:
        if host or family != socket.AF_INET6:
            raise
        return _bound(socket.AF_INET, "0.0.0.0", port)  # noqa: S104 - no IPv6 on this host


def _bound(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):  # a platform without dual-stack sockets keeps IPv6 only
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
