"""The measurement floor: the least work a Python process can do to answer a scrape.

``python -m bench.floor --port P --body FILE [--header 'Name: value' ...]`` accepts one connection at
a time, reads the request head, writes a fixed response in one ``sendall`` and closes: no HTTP
parsing, no threads. Driven by the same load generator on the same pinned cores, its latencies are
what this machine, its loopback and the generator add by themselves. A figure for an exporter close to
the floor cannot be improved much by the exporter; a target below the floor cannot be shown here.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

HEAD_END = b"\r\n\r\n"


def response(body: bytes, headers: Sequence[str]) -> bytes:
    head = ["HTTP/1.0 200 OK", *headers, f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(head).encode("latin-1") + body


def serve(listener: socket.socket, payload: bytes) -> None:
    """Answers every connection with ``payload`` until the listener is shut down or closed."""
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return  # the listener was shut down (the harness's and the tests' way to stop a floor)
        try:
            data = b""
            while HEAD_END not in data:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                data += chunk
            connection.sendall(payload)
        except OSError:
            pass
        finally:
            connection.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body", type=Path, required=True)
    parser.add_argument("--header", action="append", default=[])
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    payload = response(args.body.read_bytes(), args.header)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(1024)
    serve(listener, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
