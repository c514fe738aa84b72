"""The attackers of the siege test, in their own process so that they never share a GIL with the
client whose latency the test measures.

    python -m tests.faults.siege --port P [--tls CA.pem] [--user U --password P] [--duration S]
                                 [--report-every S]

Runs until SIGTERM (or ``--duration``), then prints one JSON line of counts; with ``--report-every``
it also prints the counts so far every S seconds, so a test can wait for the siege to reach a state
(every slowloris client cut, ...) instead of for time to pass. Every attacker is persistent: when
the exporter closes its connection (a deadline, the connection cap) it comes back.

* idle: connects and sends nothing (on the TLS port: not even a ClientHello);
* slowloris: sends a request head one byte per second (after the TLS handshake on the TLS port);
  ``slowloris_clients_cut`` counts the clients the server cut at least once;
* slow readers: send a complete, authenticated request for the whole text exposition with a 4 KiB
  receive buffer, then read 1 KiB every half second; ``slow_reader_clients_ended`` counts the
  clients whose request ended at least once, answered in full (``slow_reader_done``) or cut short
  of its Content-Length by the server (``slow_reader_cut``: the write deadline);
* wrong passwords: send requests with a fresh wrong password each time, back to back.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import resource
import signal
import socket
import ssl
import sys
from collections import Counter
from collections.abc import Sequence

HOST = "127.0.0.1"


class Siege:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.counts: Counter[str] = Counter()
        self.context: ssl.SSLContext | None = None
        if args.tls:
            self.context = ssl.create_default_context(cafile=args.tls)
            self.context.check_hostname = False
        self.stop = asyncio.Event()
        self.idle_open = 0
        self.slowloris_cut: set[int] = set()  # slowloris clients the server cut at least once
        self.slow_readers_ended: set[int] = set()  # slow readers whose request ended at least once

    def snapshot(self) -> dict[str, int]:
        return {**self.counts, "slowloris_clients_cut": len(self.slowloris_cut),
                "slow_reader_clients_ended": len(self.slow_readers_ended)}

    def authorization(self, password: str) -> str:
        return "Basic " + base64.b64encode(f"{self.args.user}:{password}".encode()).decode()

    async def pause(self, seconds: float) -> bool:
        """Sleep unless stopping; True when it is time to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()

    async def idle(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stop.is_set():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, (HOST, self.args.port))
                self.counts["idle_connected"] += 1
                self.idle_open += 1
                try:
                    while await loop.sock_recv(sock, 1024):
                        pass  # the exporter never sends anything to an idle client; wait for it to close us
                finally:
                    self.idle_open -= 1
                self.counts["idle_closed_by_server"] += 1
            except OSError:
                self.counts["idle_errors"] += 1
            finally:
                sock.close()
            if await self.pause(0.2):
                return

    async def slowloris(self, number: int) -> None:
        head = b"GET /metrics HTTP/1.1\r\nHost: exporter\r\nX-Slow: " + b"a" * 4096
        while not self.stop.is_set():
            writer = None
            try:
                _, writer = await asyncio.open_connection(HOST, self.args.port, ssl=self.context)
                self.counts["slowloris_connected"] += 1
                for byte in head:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    if await self.pause(1.0):
                        return
                self.counts["slowloris_never_cut"] += 1
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                self.counts["slowloris_cut"] += 1
                self.slowloris_cut.add(number)
            finally:
                if writer is not None:
                    writer.close()
            if await self.pause(0.2):
                return

    async def slow_reader(self, number: int) -> None:
        request = (f"GET /metrics HTTP/1.1\r\nHost: exporter\r\nAccept: text/plain\r\n"
                   f"Authorization: {self.authorization(self.args.password)}\r\n\r\n").encode()
        while not self.stop.is_set():
            writer = None
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            try:
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, (HOST, self.args.port))
                reader, writer = await asyncio.open_connection(sock=sock, ssl=self.context, limit=1024,
                                                               server_hostname="exporter" if self.context else None)
                writer.write(request)
                await writer.drain()
                self.counts["slow_reader_requests"] += 1
                length = -1
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                received = 0
                while chunk := await reader.read(1024):
                    received += len(chunk)
                    self.counts["slow_reader_bytes"] += len(chunk)
                    if await self.pause(0.5):
                        return
                self.counts["slow_reader_done" if received == length else "slow_reader_cut"] += 1
                self.slow_readers_ended.add(number)
            except (OSError, ssl.SSLError):
                self.counts["slow_reader_errors"] += 1
            finally:
                if writer is not None:
                    writer.close()
                else:
                    sock.close()
            if await self.pause(0.2):
                return

    async def wrong_password(self, number: int) -> None:
        attempt = 0
        while not self.stop.is_set():
            attempt += 1
            request = (f"GET /metrics HTTP/1.1\r\nHost: exporter\r\nAccept-Encoding: gzip\r\n"
                       f"Authorization: {self.authorization(f'wrong-{number}-{attempt}')}\r\n\r\n").encode()
            writer = None
            try:
                reader, writer = await asyncio.open_connection(HOST, self.args.port, ssl=self.context)
                writer.write(request)
                await writer.drain()
                status_line = await reader.readline()
                parts = status_line.split()
                self.counts[f"wrong_password_{parts[1].decode() if len(parts) > 1 else 'no-answer'}"] += 1
                await reader.read()
            except (OSError, ssl.SSLError):
                self.counts["wrong_password_errors"] += 1
            finally:
                if writer is not None:
                    writer.close()
            if self.stop.is_set():
                return
            await asyncio.sleep(0)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        if self.args.duration:
            loop.call_later(self.args.duration, self.stop.set)
        tasks = [asyncio.create_task(self.idle()) for _ in range(self.args.idle)]
        # All idle sockets first: then the rest arrives at an exporter that already holds 1,000 of them.
        for _ in range(100):
            if self.idle_open >= self.args.idle * 0.9 or self.stop.is_set():
                break
            await asyncio.sleep(0.05)
        tasks += [asyncio.create_task(self.slowloris(n)) for n in range(self.args.slowloris)]
        tasks += [asyncio.create_task(self.slow_reader(n)) for n in range(self.args.slow_readers)]
        tasks += [asyncio.create_task(self.wrong_password(n)) for n in range(self.args.wrong_passwords)]
        print(json.dumps({"ready": True, "idle_open": self.idle_open}), flush=True)
        if self.args.report_every:
            tasks.append(asyncio.create_task(self.report()))
        await self.stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        print(json.dumps(self.snapshot()), flush=True)

    async def report(self) -> None:
        while not await self.pause(self.args.report_every):
            print(json.dumps(self.snapshot()), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.siege")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls", help="CA file: speak TLS")
    parser.add_argument("--user", default="prometheus")
    parser.add_argument("--password", default="")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slowloris", type=int, default=64)
    parser.add_argument("--slow-readers", type=int, default=40)
    parser.add_argument("--wrong-passwords", type=int, default=200)
    parser.add_argument("--duration", type=float, default=0.0)
    parser.add_argument("--report-every", type=float, default=0.0)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    asyncio.run(Siege(args).run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
