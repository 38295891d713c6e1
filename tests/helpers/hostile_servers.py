"""Real loopback servers that misbehave the way real ones do: accept a connection and never answer,
answer half a body and stall, or trickle a byte now and then (which never trips a plain read
timeout). Plain sockets on a free port (port 0), one thread per connection; no mocks.

``HostileServer(route)``: ``route(request_line, headers_and_body_bytes)`` returns the whole answer
as bytes (sent at once), or one of ``SILENT``, ``STALL``, ``TRICKLE``, ``CLOSE`` for the misbehaviour;
``HostileServer(GREET_TRICKLE)`` is a server that speaks first (SMTP) and trickles its greeting.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import orjson

SILENT = "silent"  # read the request, then say nothing until the server stops
STALL = "stall"  # headers and half the body promised, then nothing
TRICKLE = "trickle"  # headers, then one byte every 50 ms, forever
CLOSE = "close"  # read the request, close the connection without a word
GREET_TRICKLE = "greet-trickle"  # a server that speaks first (SMTP): "220 " then one byte every 50 ms


def http_answer(body: bytes | str, *, status: str = "200 OK", content_type: str = "application/json") -> bytes:
    data = body.encode() if isinstance(body, str) else body
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n").encode() + data


class HostileServer:
    def __init__(self, route: Callable[[str, bytes], bytes | str] | str) -> None:
        self.route = route if callable(route) else (lambda _line, _raw, mode=route: mode)
        self.speaks_first = route == GREET_TRICKLE  # no request to wait for: the client waits for us
        self.requests: list[str] = []
        self.stopped = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> tuple[str, bytes]:
        conn.settimeout(5)
        raw = b""
        while b"\r\n\r\n" not in raw and b"\n\n" not in raw:
            piece = conn.recv(65536)
            if not piece:
                break
            raw += piece
        line = raw.split(b"\r\n", 1)[0].decode("latin-1")
        return line, raw

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.speaks_first:
                    conn.sendall(b"220 ")
                    while not self.stopped.wait(0.05):
                        conn.sendall(b".")
                    return
                line, raw = self._read_request(conn)
                self.requests.append(line)
                answer = self.route(line, raw)
                if answer == SILENT:
                    self.stopped.wait()
                elif answer == STALL:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 1000\r\n\r\n" + b'{"status":"success","data":{')
                    self.stopped.wait()
                elif answer == TRICKLE:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 100000\r\n\r\n")
                    while not self.stopped.wait(0.05):
                        conn.sendall(b" ")
                elif answer == CLOSE:
                    return
                else:
                    conn.sendall(answer)
            except OSError:
                return

    def stop(self) -> None:
        self.stopped.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        self.thread.join(timeout=2)

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# --- a Prometheus that answers part of a backfill, then misbehaves ------------------------------
T0 = 1_764_547_200  # 2025-12-01T00:00:00Z, on the 30 s grid
SERIES = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1", "Hostname": "n1", "gpu": "0"}


def matrix(start: int, end: int) -> bytes:
    values = [[t, "50"] for t in range(start, end + 1, 30)]
    return orjson.dumps({"status": "success", "data": {"resultType": "matrix",
                                                       "result": [{"metric": SERIES, "values": values}]}})


def prometheus_until(misbehaviour: str, *, from_s: int):
    """A Prometheus that answers discovery and every query_range starting before ``from_s``,
    and misbehaves on the others."""
    def route(line: str, _raw: bytes):
        target = urlsplit(line.split(" ")[1])
        if target.path.endswith("/label/__name__/values"):
            return http_answer(orjson.dumps({"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL"]}))
        query = parse_qs(target.query)
        start, end = int(query["start"][0]), int(query["end"][0])
        return http_answer(matrix(start, end)) if start < from_s else misbehaviour
    return route
