"""The HTTP endpoint of one feed or one producer service: ``/metrics`` and ``/stats``.

``/metrics`` is the Prometheus text format of a private :class:`CollectorRegistry` (never the
global one: several feeds can live in one process, each with its own port); ``/stats`` is the
same figures as one JSON object, the snapshot its owner's ``stats()`` returns (what
``h5feed top`` reads).

Guarantees:

1. Port 0 binds a free port; :attr:`MetricsServer.port` is the port bound, so callers (and
   tests) never race for one.
2. Figures are read when scraped (collectors call the owner's snapshot), never counted twice.
3. Requests are served by a bounded pool of daemon threads (:data:`POOL_THREADS`), away from
   training: a failing snapshot answers HTTP 500 with the error's text instead of taking
   anything down. Clients cannot hold the process's threads or descriptors, nor starve a
   scraper: one thread reads every request's head without blocking on any connection (an
   idle connection costs a descriptor, never a thread); a connection that sends no
   complete head within :data:`IDLE_TIMEOUT_S`, or a head over :data:`MAX_HEAD_BYTES`, is
   closed; past :data:`READING_CONNECTIONS` being read, the oldest is closed, so a new
   scrape always gets in; at most :data:`QUEUED_CONNECTIONS` complete requests wait for a
   thread, and one more is closed at once (its scraper retries at the next scrape).
4. :meth:`MetricsServer.close` stops serving and frees the port; it is idempotent.
5. It listens on 127.0.0.1 unless a host is given (``"0.0.0.0:9100"``: every interface, for
   a scraper on another host): nothing is served beyond this host by default.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from h5feed.common.system.logs import with_ids

#: The environment variable of the port (consumer and producer alike), read at construction.
METRICS_PORT_ENV = "H5FEED_METRICS_PORT"
#: Where metrics listen when no host is given: this host only. ``/stats`` names files, hosts
#: and workers; serving it to other hosts is a choice made by giving "0.0.0.0:PORT".
DEFAULT_HOST = "127.0.0.1"
#: With the port from the environment, a port already taken (a second feed of the same
#: process: training and validation) moves on to the next ones, this many at most.
_ENV_PORT_TRIES = 32

_log = with_ids(logging.getLogger("h5feed.metrics"), "metrics")  # ids in every line

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def check_port(value: object, source: str) -> int:
    """``value`` if it is a TCP port number (an int 0..65535; 0: a free one), else a
    ValueError naming ``source``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(
            f'{source} must be a port number (0..65535; 0: a free one) or "HOST:PORT", '
            f"got {value!r}"
        )
    return value


def metrics_address(value: object, source: str) -> tuple[str, int]:
    """(host, port) to serve metrics on, from a port (an int: on ``DEFAULT_HOST``) or a
    ``"HOST:PORT"`` string (``"0.0.0.0:9100"``, ``"[::]:9100"``; ``*`` is ``0.0.0.0``).
    ValueError naming ``source`` otherwise; a bare ``"9100"`` string is not a port (say
    which host, or pass the int)."""
    if not isinstance(value, str):
        return DEFAULT_HOST, check_port(value, source)
    host, colon, port_text = value.rpartition(":")
    if not colon or not host or not port_text.isdigit():
        check_port(value, source)  # raises, naming the value
    host = "0.0.0.0" if host == "*" else host.removeprefix("[").removesuffix("]")
    return host, check_port(int(port_text), source)


def address_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """(host, port) from ``$H5FEED_METRICS_PORT``: a port (on ``DEFAULT_HOST``) or HOST:PORT;
    None when unset or empty; ValueError naming the variable when it is neither."""
    text = (os.environ if environ is None else environ).get(METRICS_PORT_ENV, "").strip()
    if not text:
        return None
    source = f"${METRICS_PORT_ENV}"
    return metrics_address(int(text) if text.isdigit() else text, source)


#: Threads that serve requests (a scrape takes milliseconds; a few scrapers share them).
POOL_THREADS: Final = 4
#: Complete requests that may wait for a thread; beyond, a new one is closed at once.
QUEUED_CONNECTIONS: Final = 16
#: Connections whose request is still being read; past it, the oldest is closed.
READING_CONNECTIONS: Final = 64
#: A connection that has not sent its whole request within this is closed (slowloris).
IDLE_TIMEOUT_S: Final = 5.0
#: The most a request's head (request line and headers) may take; a longer one is closed.
MAX_HEAD_BYTES: Final = 8192


class _Reader:
    """Reads the heads of requests on one thread of its own, without blocking on any
    connection, and hands each complete one to ``ready`` (guarantee 3): an idle or slow
    connection costs a descriptor and a few bytes, never a thread."""

    def __init__(self, ready: queue.Queue[tuple[Any, Any, bytes] | None]) -> None:
        self._ready = ready
        self._selector = selectors.DefaultSelector()
        self._wake_in, self._wake_out = socket.socketpair()
        self._wake_in.setblocking(False)
        self._selector.register(self._wake_out, selectors.EVENT_READ)
        self._lock = threading.Lock()
        self._incoming: collections.deque[tuple[Any, Any]] = collections.deque()
        # connection -> (address, head so far, deadline); oldest first
        self._reading: collections.OrderedDict[Any, tuple[Any, bytes, float]] = (
            collections.OrderedDict()
        )
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name="h5feed-metrics-read", daemon=True)
        self.thread.start()

    def add(self, connection: Any, address: Any) -> None:
        """Read ``connection``'s request (from the accepting thread)."""
        with self._lock:
            self._incoming.append((connection, address))
        with contextlib.suppress(OSError):  # full: a wake-up is pending already
            self._wake_in.send(b"\0")

    def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self._wake_in.send(b"\0")

    def _run(self) -> None:
        try:
            while not self._stopped:
                for key, _ in self._selector.select(timeout=0.2):
                    if key.fileobj is self._wake_out:
                        with contextlib.suppress(OSError):
                            self._wake_out.recv(4096)
                    else:
                        self._read(key.fileobj)
                self._admit()
                self._expire(time.monotonic())
        finally:
            for connection in list(self._reading):
                self._close(connection)
            with self._lock:
                for connection, _ in self._incoming:
                    _close(connection)
            self._selector.close()
            self._wake_in.close()
            self._wake_out.close()

    def _admit(self) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, collections.deque()
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        for connection, address in incoming:
            if len(self._reading) >= READING_CONNECTIONS:  # the oldest goes: a new one gets in
                self._close(next(iter(self._reading)))
            connection.setblocking(False)
            self._selector.register(connection, selectors.EVENT_READ)
            self._reading[connection] = (address, b"", deadline)

    def _read(self, connection: Any) -> None:
        address, head, deadline = self._reading[connection]
        try:
            data = connection.recv(MAX_HEAD_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        head += data
        if not data or len(head) > MAX_HEAD_BYTES:
            self._close(connection)
        elif b"\r\n\r\n" in head or b"\n\n" in head:
            self._selector.unregister(connection)
            del self._reading[connection]
            connection.setblocking(True)
            connection.settimeout(IDLE_TIMEOUT_S)  # for writing the answer
            try:
                self._ready.put_nowait((connection, address, head))
            except queue.Full:  # every thread busy and the queue full: not served
                _close(connection)
        else:
            self._reading[connection] = (address, head, deadline)

    def _expire(self, now: float) -> None:
        while self._reading:
            connection, (_, _, deadline) = next(iter(self._reading.items()))
            if now < deadline:
                break
            self._close(connection)

    def _close(self, connection: Any) -> None:
        self._reading.pop(connection, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection)
        _close(connection)


def _close(connection: Any) -> None:
    with contextlib.suppress(OSError):
        connection.close()


class _PooledServer(WSGIServer):
    """A WSGI server whose requests are read by one :class:`_Reader` and served by
    ``POOL_THREADS`` daemon threads from a queue of at most ``QUEUED_CONNECTIONS`` (see
    guarantee 3)."""

    request_queue_size = 64  # the listen backlog: a burst of scrapers is not refused by TCP

    def server_activate(self) -> None:
        super().server_activate()
        self._waiting: queue.Queue[tuple[Any, Any, bytes] | None] = queue.Queue(QUEUED_CONNECTIONS)
        self.heads = threading.local()  # each thread's request head, for its handler
        self._reader = _Reader(self._waiting)
        self._threads = [
            threading.Thread(target=self._serve_queued, name=f"h5feed-metrics-{i}", daemon=True)
            for i in range(POOL_THREADS)
        ]
        for thread in self._threads:
            thread.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        self._reader.add(request, client_address)

    def _serve_queued(self) -> None:
        while (item := self._waiting.get()) is not None:
            request, client_address, self.heads.value = item
            try:
                self.finish_request(request, client_address)
            except Exception as exc:  # a client that timed out or hung up: its own loss
                _log.debug("h5feed metrics: a request from %s failed: %r", client_address, exc)
            finally:
                self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        reader = getattr(self, "_reader", None)  # none if the bind failed
        if reader is not None:
            reader.stop()
        for _thread in getattr(self, "_threads", ()):
            try:
                self._waiting.put_nowait(None)
            except queue.Full:
                break  # they are daemon threads: the busy ones end with their request


class _PooledServer6(_PooledServer):
    address_family = socket.AF_INET6  # "[::]:9100", "[::1]:9100"


class _QuietHandler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S  # set on the connection before its answer is written

    def setup(self) -> None:
        super().setup()
        # The head was read already, by the reader; the request is a GET (no body is read).
        self.rfile = io.BytesIO(self.server.heads.value)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds are not worth a line each."""


class MetricsServer:
    """Serves ``/metrics`` from ``registry`` and ``/stats`` from ``stats()`` on one port."""

    def __init__(
        self,
        registry: CollectorRegistry,
        stats: Callable[[], Mapping[str, Any]],
        port: int,
        *,
        search: bool = False,
        host: str = DEFAULT_HOST,
    ) -> None:
        """Bind ``host``:``port`` (0: a free one) and start serving. ``search``: if the port
        is taken, try the next ones (see ``_ENV_PORT_TRIES``); else an OSError names it."""
        self._registry = registry
        self._stats = stats
        tries = _ENV_PORT_TRIES if search and port else 1
        for attempt in range(tries):
            try:
                server_class = _PooledServer6 if ":" in host else _PooledServer
                self._server = make_server(
                    host, port + attempt, self._app, server_class, _QuietHandler
                )
                break
            except OSError as exc:
                if attempt == tries - 1:
                    raise OSError(
                        exc.errno,
                        f"h5feed metrics: cannot listen on port {port + attempt} of {host}: {exc}",
                    ) from exc
        self.port: int = self._server.server_port
        #: The address bound: ``DEFAULT_HOST`` unless another host was given.
        self.host = host
        self._closed = False
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"h5feed-metrics-{self.port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def bound_address(self) -> tuple[str, int]:
        """(host, port) as the listening socket reports it (``getsockname``)."""
        host, port = self._server.socket.getsockname()[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """Where this host reaches it (loopback when bound to every interface)."""
        if host_is_any(self.host):
            return f"http://127.0.0.1:{self.port}"
        return (
            f"http://[{self.host}]:{self.port}"
            if ":" in self.host
            else (f"http://{self.host}:{self.port}")
        )

    def close(self) -> None:
        """Stop serving and free the port (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        try:
            if path == "/metrics":
                body = generate_latest(self._registry)
                content_type = CONTENT_TYPE_LATEST
            elif path == "/stats":
                body = json.dumps(self._stats(), default=str).encode()
                content_type = "application/json"
            elif path == "/":
                body = b"h5feed: /metrics (Prometheus), /stats (JSON, read by h5feed top)\n"
                content_type = "text/plain; charset=utf-8"
            else:
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"not found: try /metrics or /stats\n"]
        except Exception as exc:  # a scrape must never take the trainer or producer down
            _log.warning("h5feed metrics: %s failed: %r", path, exc)
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [f"{type(exc).__name__}: {exc}\n".encode()]
        start_response("200 OK", [("Content-Type", content_type)])
        return [body]


def host_is_any(host: str) -> bool:
    """True for the wildcard addresses that bind every interface."""
    return host in ("0.0.0.0", "::", "")
