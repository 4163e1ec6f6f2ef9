"""The consumer's end of the wire: one ROUTER socket, bound, secured, polled with a waker.

ZeroMQ sockets are not thread-safe: a :class:`Router` is used by one thread (the
loop's) from construction to :meth:`close`; only the waker it polls may be poked from
other threads. Sends never block for long: ``ROUTER_MANDATORY`` makes a send to a gone peer
fail at once (EHOSTUNREACH) and a peer that stopped reading fails after ``SNDTIMEO``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import zmq

from h5feed.common import messages
from h5feed.common.liveness import consumer_heartbeat_timeout, enable_heartbeats
from h5feed.consumer.options import FeedOptions
from h5feed.consumer.security import CurveServer

_SEND_TIMEOUT_MS = 5000


class Router:
    """The ROUTER socket bound to ``addresses`` (CURVE-secured when ``options`` say so),
    polled together with the file descriptor ``wake_fd``."""

    def __init__(self, options: FeedOptions, addresses: list[str], wake_fd: int) -> None:
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._curve: CurveServer | None = None
        if options.curve_key is not None:
            self._curve = CurveServer(
                self._context, options.curve_key, options.curve_authorized or ""
            )
            self._curve.secure(self._socket)
        # The local workers' CURVE keys (made for this iteration) and the consumer's key.
        self.local_keys = self._curve.local_keys if self._curve else None
        self.server_public = self._curve.public if self._curve else None
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._socket.setsockopt(zmq.SNDTIMEO, _SEND_TIMEOUT_MS)
        # Per frame, before bind: libzmq reads a frame's declared size and disconnects a
        # peer that declares more, before buffering any of it (a 2 GB frame costs nothing).
        self._socket.setsockopt(zmq.MAXMSGSIZE, options.max_message_bytes)
        enable_heartbeats(self._socket, consumer_heartbeat_timeout(options.peer_timeout_s))
        for address in addresses:
            self._socket.bind(address)
        self._wake_fd = wake_fd
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        self._poller.register(wake_fd, zmq.POLLIN)

    def poll(self, timeout_ms: int) -> tuple[bool, bool]:
        """Wait up to ``timeout_ms`` for a message or a wake-up: (messages wait, woken)."""
        events = dict(self._poller.poll(timeout_ms))
        return bool(events.get(self._socket)), bool(events.get(self._wake_fd))

    def waiting(self, most: int) -> Iterator[list[zmq.Frame]]:
        """The messages waiting now (at most ``most``), each as its frames, identity first."""
        # Ask the socket whether a message waits rather than receiving until zmq.Again: an
        # exception per wake-up costs more than the check (this runs per batch).
        for _ in range(most):
            if not cast(int, self._socket.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                return
            yield self._socket.recv_multipart(zmq.NOBLOCK, copy=False)

    def send(self, identity: bytes, message: messages.Message, flags: int = 0) -> None:
        """Send one message to ``identity``; zmq.ZMQError when it cannot be delivered."""
        # Copied: control messages are small, and a zero-copy send costs more for them.
        self._socket.send_multipart([identity, *messages.encode(message)], flags)

    def close(self) -> None:
        """Close the socket, stop the CURVE server and end the context."""
        self._socket.close(linger=0)
        if self._curve is not None:
            self._curve.stop()
        self._context.term()
