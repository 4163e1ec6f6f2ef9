"""The consumer's end of the wire: one ROUTER socket, bound, secured, polled with a waker.

ZeroMQ sockets are not thread-safe: a :class:`Router` is used by one thread (the
loop's) from construction to :meth:`close`; only the waker it polls may be poked from
other threads. Sends never block for long: ``ROUTER_MANDATORY`` makes a send to a gone peer
fail at once (EHOSTUNREACH) and a peer that stopped reading fails after ``SNDTIMEO``.

Connections that never speak ZMTP (a keyless flood of plain TCP connects, held open) cost
the trainer one descriptor each, and libzmq aborts the process when accepting a local
worker's ``ipc://`` connection fails for want of one. So, before it binds, the router

1. raises the process's soft ``RLIMIT_NOFILE`` to the hard limit (a soft 1,024 is common;
   hard limits are usually far higher: 524,288 under systemd, 1,048,576 in Docker), and
2. sets ``ZMQ_HANDSHAKE_IVL`` to :data:`HANDSHAKE_TIMEOUT_S`: libzmq closes a connection
   whose ZMTP (and CURVE) handshake is not done by then, so a connection that sends nothing
   holds its descriptor at most that long.

A flood then ends the run only by holding more connections than the hard limit leaves free,
renewing each within :data:`HANDSHAKE_TIMEOUT_S`; a listening trainer whose hard limit is
below :data:`_LOW_HARD_LIMIT` says so in a warning when it binds beyond loopback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Final, cast

import zmq

from h5feed.common.protocol import messages
from h5feed.common.protocol.liveness import consumer_heartbeat_timeout, enable_heartbeats
from h5feed.common.protocol.versions import PROTOCOL_VERSION
from h5feed.common.system.fd_limit import raise_open_files_limit
from h5feed.common.trust.curve import KeyPair
from h5feed.common.trust.curve_server import CurveServer
from h5feed.common.trust.exposure import is_local_address
from h5feed.consumer.config.groups import FeedOptions

_SEND_TIMEOUT_MS = 5000
#: A connection must finish its ZMTP (and CURVE) handshake within this, or libzmq closes it
#: (its default is 30 s). Loopback and LAN handshakes take milliseconds.
HANDSHAKE_TIMEOUT_S: Final = 5.0
#: A hard descriptor limit below this is worth a warning when the port is reachable by others.
_LOW_HARD_LIMIT: Final = 8192
_log = logging.getLogger("h5feed.consumer")


class Router:
    """The ROUTER socket bound to ``addresses`` (CURVE-secured when ``options`` say so),
    polled together with the file descriptor ``wake_fd``."""

    def __init__(self, options: FeedOptions, addresses: list[str], wake_fd: int) -> None:
        _, hard = raise_open_files_limit()  # each connection holds a descriptor
        exposed = [a for a in addresses if not is_local_address(a)]
        if exposed and hard < _LOW_HARD_LIMIT:
            _log.warning(
                "listening on %s with a hard limit of %d open descriptors: a flood of held "
                "connections can exhaust them; raise it (ulimit -Hn, LimitNOFILE=, docker "
                "--ulimit nofile=) to %d or more",
                ", ".join(exposed), hard, _LOW_HARD_LIMIT,
            )  # fmt: skip
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._curve: CurveServer | None = None
        # The local workers' CURVE keys (made for this iteration) and the consumer's key.
        self.local_keys: KeyPair | None = None
        if options.network.curve_key is not None:
            self.local_keys = KeyPair.generate()
            self._curve = CurveServer(
                self._context,
                options.network.curve_key,
                options.network.curve_authorized or "",
                extra_keys=[self.local_keys.public],
            )
            self._curve.secure(self._socket)
        self.server_public = self._curve.public if self._curve else None
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._socket.setsockopt(zmq.SNDTIMEO, _SEND_TIMEOUT_MS)
        self._socket.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_TIMEOUT_S * 1000))
        # Per frame, before bind: libzmq reads a frame's declared size and disconnects a
        # peer that declares more, before buffering any of it (a 2 GB frame costs nothing).
        self._socket.setsockopt(zmq.MAXMSGSIZE, options.network.max_message_bytes)
        enable_heartbeats(self._socket, consumer_heartbeat_timeout(options.network.peer_timeout_s))
        for address in addresses:
            self._socket.bind(address)
        #: Where the last address was bound (``listen=``'s, when given: its port, when it
        #: asked for port 0, is the one chosen).
        self.last_endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
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

    def send(
        self, identity: bytes, message: messages.Message, flags: int = 0, version: int = 0
    ) -> None:
        """Send one message to ``identity`` in protocol ``version`` (0: the current one);
        zmq.ZMQError when it cannot be delivered, FeatureVersionError when ``version``
        cannot carry it."""
        frames = messages.encode(message, version or PROTOCOL_VERSION)
        # Copied: control messages are small, and a zero-copy send costs more for them.
        self._socket.send_multipart([identity, *frames], flags)

    @property
    def refused_keys(self) -> int:
        """CURVE clients refused so far for a key that is not listed (0 without CURVE)."""
        return self._curve.refused_keys if self._curve is not None else 0

    def close(self) -> None:
        """Close the socket, stop the CURVE server and end the context."""
        self._socket.close(linger=0)
        if self._curve is not None:
            self._curve.stop()
        self._context.term()


def user_id(frames: Sequence[object]) -> str | None:
    """The CURVE key (Z85) ZeroMQ's authenticator gave the connection ``frames`` came on."""
    get = getattr(frames[0], "get", None) if frames else None
    if get is None:
        return None
    try:
        value = get("User-Id")
    except zmq.ZMQError:
        return None
    return value if isinstance(value, str) and value else None
