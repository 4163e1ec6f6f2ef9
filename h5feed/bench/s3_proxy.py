"""A fault- and latency-injecting HTTP proxy in front of a local S3 server: what a flaky or
distant object store answers, on loopback (tests/system/test_object_storage.py,
:mod:`h5feed.bench.object_storage`).

Every request is forwarded to the server unchanged (method, path, headers, body), after
``delay_s`` (a round trip to a distant store), except those a rule picks, answered ``503
SlowDown`` as S3 does when throttling: every ``every``-th request (counted over all
requests), and every request whose path contains ``failing``; every ``reset``-th request is
answered with a reset connection (no answer: the socket closed with ``SO_LINGER`` 0, so the
client reads a TCP RST); every ``slow``-th is forwarded ``slow_s`` late (on top of
``delay_s``); and every ``truncate``-th ranged GET (a read of an object) is answered with its
headers and only half its body, then the connection is closed (a body cut short).
Requests, 503s (``faults``), resets, slowed requests, truncations and the bytes of the
answers' bodies are counted. The proxy serves from a daemon thread; :meth:`FaultProxy.stop`
closes it (bounded)."""

from __future__ import annotations

import http.client
import http.server
import socket
import struct
import sys
import threading
import time
import urllib.parse
from typing import Any

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
#: The longest a forwarded request may take (the server is on loopback).
_FORWARD_TIMEOUT_S = 30.0
_HOP_HEADERS = ("content-length", "connection", "transfer-encoding", "keep-alive")


class FaultProxy:
    """A proxy on 127.0.0.1 (:attr:`endpoint`) forwarding to ``target`` (``http://host:port``)."""

    def __init__(
        self,
        target: str,
        every: int = 0,
        failing: str | None = None,
        delay_s: float = 0.0,
        truncate: int = 0,
        reset: int = 0,
        slow: int = 0,
        slow_s: float = 0.2,
    ) -> None:
        parsed = urllib.parse.urlsplit(target)
        self.target = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.every, self.failing, self.delay_s, self.truncate = every, failing, delay_s, truncate
        self.reset, self.slow, self.slow_s = reset, slow, slow_s
        self.requests = self.faults = self.body_bytes = self.ranged = self.truncated = 0
        self.resets = self.slowed = 0
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def fault(self, path: str) -> str | None:
        """What this request meets (counted): ``"503"``, ``"reset"``, ``"slow"`` or None."""
        with self._lock:
            self.requests += 1
            n = self.requests
            if (self.every > 0 and n % self.every == 0) or (
                self.failing is not None and self.failing in path
            ):
                self.faults += 1
                return "503"
            if self.reset > 0 and n % self.reset == 0:
                self.resets += 1
                return "reset"
            if self.slow > 0 and n % self.slow == 0:
                self.slowed += 1
                return "slow"
            return None

    def cut(self, method: str, ranged: bool) -> bool:
        """Whether this answer's body is cut short (counted)."""
        if method != "GET" or not ranged or self.truncate <= 0:
            return False
        with self._lock:
            self.ranged += 1
            hit = self.ranged % self.truncate == 0
            self.truncated += hit
            return hit

    def forward(
        self, method: str, path: str, body: bytes, headers: dict[str, str], late: bool = False
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """The server's answer: (status, headers, body), ``slow_s`` later when ``late``."""
        if self.delay_s > 0 or late:
            time.sleep(self.delay_s + (self.slow_s if late else 0.0))
        connection = http.client.HTTPConnection(*self.target, timeout=_FORWARD_TIMEOUT_S)
        try:
            connection.request(method, path, body or None, headers)
            answer = connection.getresponse()
            data = answer.read()
            with self._lock:
                self.body_bytes += len(data)
            return answer.status, answer.getheaders(), data
        finally:
            connection.close()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client that closed its connection mid-answer (a worker killed, a body cut short)
    is what the proxy is for, not an error to print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler(proxy: FaultProxy) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _reply(
            self, status: int, headers: list[tuple[str, str]], body: bytes, cut: bool = False
        ) -> None:
            self.send_response(status)
            length = str(len(body))
            for key, value in headers:
                if key.lower() == "content-length" and self.command == "HEAD":
                    length = value  # a HEAD answer's length is the object's: kept
                elif key.lower() not in _HOP_HEADERS:
                    self.send_header(key, value)
            self.send_header("Content-Length", length)
            self.end_headers()
            if cut:  # half the body announced, then the connection closed
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
            elif self.command != "HEAD":
                self.wfile.write(body)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = proxy.fault(self.path)
            if fault == "503":
                self._reply(503, [("Content-Type", "application/xml")], _SLOW_DOWN)
                return
            if fault == "reset":  # no answer: a TCP RST when the server closes the socket
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            if body:
                headers["Content-Length"] = str(len(body))
            cut = proxy.cut(self.command, "range" in {k.lower() for k in headers})
            status, answer_headers, answer = proxy.forward(
                self.command, self.path, body, headers, late=fault == "slow"
            )
            self._reply(status, answer_headers, answer, cut=cut)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

    return Handler
