"""A bound on the connections a fleet's front holds, so a flood cannot take a replica's
descriptors.

Every TCP connection to the front's ROUTER holds one descriptor of the replica's process, and
libzmq accepts them before any handshake (CURVE included): without a bound, 1,024 idle
connections, which need no key, leave no descriptor for the next worker start
(``OSError(EMFILE)``). libzmq has no option that caps the connections of a bound socket, so
the front counts them from the socket's monitor events (``ACCEPTED`` and ``DISCONNECTED``
carry the connection's descriptor) and sheds the excess itself.

Guarantees:

1. **Bounded.** Once more than :attr:`ConnectionGuard.limit` connections are open, the oldest
   are shut down (``shutdown(2)`` on the descriptor: libzmq sees the end of the stream and
   closes it itself; the front never closes a descriptor libzmq owns), each counted in
   :attr:`ConnectionGuard.shed`. A trainer's announcer reconnects and says ATTACH again
   every second, and its attachment outlives a lost connection for ``--attach-timeout-s``;
   a flood of held connections is shed down to the limit, so a newcomer always gets in.
2. **A reserve.** :func:`connection_limit` leaves :data:`FD_RESERVE` descriptors below the
   soft ``RLIMIT_NOFILE`` (worker starts, stats files, the metrics endpoint) beyond what the
   process held when the front started, and holds at most
   :data:`CONNECTIONS_PER_TRAINER` connections per trainer the front may serve (a trainer
   needs one). A burst faster than the front's loop may take descriptors for the
   milliseconds before it is shed; a worker start that fails then is retried
   (``h5feed/producer/service/worker_group.py``).
3. What it gives up: the oldest connection is shed first, whoever holds it, since a
   connection cannot be told apart from a trainer's before its first message and the
   monitor does not say which connection a message came on. A trainer's connection shed by
   a flood that reconnects without end is back within its reconnect interval (0.1 s); its
   workers' connections (to the trainer) are not the front's and never shed.
"""

from __future__ import annotations

import collections
import contextlib
import os
import resource
import socket
from typing import Final

import zmq
from zmq.utils.monitor import recv_monitor_message

#: Descriptors kept free below the soft limit, beyond those held when the front started.
FD_RESERVE: Final = 256
#: Connections held per trainer the front may serve (one, and reconnects in flight).
CONNECTIONS_PER_TRAINER: Final = 4
#: Connections held beyond those, for probes and trainers arriving while others leave.
SPARE_CONNECTIONS: Final = 32
#: Monitor events handled per call, so a flood cannot hold the front's loop.
_EVENTS_PER_CALL: Final = 4096
#: Monitor events that may wait to be read (two messages each: 2 x 64 Ki events).
_EVENTS_QUEUED: Final = 1 << 18


def open_descriptors() -> int:
    """Descriptors this process holds now (``/proc/self/fd``; 64 where it cannot be read)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


def connection_limit(max_trainers: int) -> int:
    """The connections a front serving ``max_trainers`` holds at most (guarantee 2)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = CONNECTIONS_PER_TRAINER * max_trainers + SPARE_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - open_descriptors() - FD_RESERVE))


class ConnectionGuard:
    """Sheds the oldest connections of ``router`` past ``limit`` (see the module)."""

    def __init__(self, router: zmq.Socket[bytes], limit: int) -> None:
        """Call before ``router`` binds, so no connection is missed."""
        self.limit = limit
        self.shed = 0
        address = f"inproc://h5feed-front-monitor-{id(self)}"
        router.monitor(address, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)
        self.monitor = router.context.socket(zmq.PAIR)
        # An event dropped at the queue's limit would put the count out of step for good:
        # room for a burst of this many connections between two reads.
        self.monitor.setsockopt(zmq.RCVHWM, _EVENTS_QUEUED)
        self.monitor.setsockopt(zmq.LINGER, 0)
        self.monitor.connect(address)
        self._router = router
        self._open: collections.OrderedDict[int, None] = collections.OrderedDict()  # oldest 1st

    @property
    def connections(self) -> int:
        """Connections open now, as the events said."""
        return len(self._open)

    def tend(self) -> int:
        """Read the monitor's events and shed the connections past the limit; returns how
        many were shed now."""
        for _ in range(_EVENTS_PER_CALL):
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                break
            fd = int(event["value"])
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._open[fd] = None
            else:  # DISCONNECTED or CLOSED: a shed one's too (no longer listed)
                self._open.pop(fd, None)
        shed = 0
        while len(self._open) > self.limit:
            fd, _ = self._open.popitem(last=False)
            _shut_down(fd)
            shed += 1
        self.shed += shed
        return shed

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._router.disable_monitor()
        self.monitor.close(linger=0)


def _shut_down(fd: int) -> None:
    """End the TCP connection on ``fd`` without closing the descriptor (libzmq owns it and
    closes it once it reads the end). A descriptor already closed or reused by something
    that is not a socket is left alone."""
    try:
        connection = socket.socket(fileno=fd)
    except OSError:  # closed meanwhile, or not a socket
        return
    try:
        if connection.type == socket.SOCK_STREAM:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
    finally:
        connection.detach()  # never closed here
