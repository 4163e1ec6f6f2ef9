"""The worker's DEALER socket to its consumer, and how a broken connection is told apart.

ZeroMQ reconnects a DEALER by itself: when a connection closes (a heartbeat timeout after a
pause of the whole job longer than it, a network cut, the consumer's end timing out) the
socket dials again under the same routing id, and nothing tells the application. But what
was on the way when the old connection closed is gone in both directions: a UNIT queued in
the consumer's ZeroMQ thread, a DATA queued in the worker's. The consumer, still seeing a
worker under that id (its PINGs go through on the new connection), then waited for the lost
UNIT's answer until ``unit_timeout_s`` (120 s by default): a stall of the whole feed.

So :class:`Connection` watches its socket's monitor for ``DISCONNECTED``, and the worker loop
asks :meth:`Connection.broke` between messages. Once it says True the worker starts over as
a new session (:meth:`h5feed.producer.worker.loop.Worker.start_over`): a fresh socket (what
the old one still held, in or out, is dropped with it, so no message of the old session is
ever answered on the new one) and a HELLO with a new nonce, which tells the consumer to hand
the units of the old session to others (``h5feed.consumer.core.session``, rule 2).

Guarantees:

1. :meth:`broke` is True only for a connection that was made and then closed, and only when
   something was heard on this socket since it was opened (``heard``): a socket that never
   reached a consumer holds no session to lose, so failed dials and refused handshakes do
   not make a worker start over again and again.
2. :meth:`broke` never blocks and costs one ``getsockopt`` when nothing happened (it runs
   once per message on the hot path).
3. :meth:`renew` closes the old socket and its monitor at once (linger 0) and returns a new
   socket with the same options, CURVE keys and address, under a routing id of its own
   (``NAME~1``, ``NAME~2``...): a ROUTER that still holds the old connection when the new
   one arrives would otherwise ignore the new one for good (libzmq drops a duplicate
   routing id unless ``ROUTER_HANDOVER`` is set, and handover would let any connection take
   over an identity). The consumer knows it for the same process by its HELLO (name, pid,
   host, and CURVE key).
"""

from __future__ import annotations

from typing import Any, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from h5feed.common.protocol import messages
from h5feed.common.protocol.handshake import routing_id
from h5feed.common.protocol.liveness import WORKER_TIMEOUT_S, enable_heartbeats
from h5feed.common.trust.curve import KeyPair, make_client

#: A DEALER blocks a send while it has no connected peer (the consumer is gone or
#: restarting); sends time out this often so the loop re-checks whether the worker should
#: leave instead of waiting.
SEND_RETRY_MS = 500


class Connection:
    """One DEALER socket connected to ``address`` and the monitor that says when a connection
    of it closed (see the module docstring)."""

    def __init__(
        self,
        context: zmq.Context[Any],
        address: str,
        routing_id: bytes,
        max_message_bytes: int,
        curve: tuple[KeyPair, bytes] | None = None,
    ) -> None:
        self._context, self._address, self._routing_id = context, address, routing_id
        self._max_message_bytes, self._curve = max_message_bytes, curve
        self.renewals = 0  # sockets opened after the first (each with its own routing id)
        #: Whether a message was received on this socket since it was opened (the loop sets
        #: it): a session exists that a closed connection may have broken.
        self.heard = False
        self.socket, self._monitor = self._open()

    def _open(self) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDTIMEO, SEND_RETRY_MS)
        socket.setsockopt(zmq.ROUTING_ID, routing_id(self._routing_id, self.renewals))
        # Per frame: libzmq disconnects a peer that declares a larger one, unbuffered.
        socket.setsockopt(zmq.MAXMSGSIZE, self._max_message_bytes)
        enable_heartbeats(socket, WORKER_TIMEOUT_S)  # see h5feed.common.protocol.liveness
        if self._curve is not None:  # a CURVE client that also checks the consumer's key
            make_client(socket, *self._curve)
        monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        monitor.setsockopt(zmq.LINGER, 0)
        socket.connect(self._address)
        return socket, monitor

    def broke(self) -> bool:
        """Whether a connection of the socket closed since the last call, with a session on
        it (guarantee 1). Reads every event waiting; never blocks."""
        if not self._waiting():
            return False
        closed = False
        while self._waiting():
            event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            closed = closed or event["event"] == zmq.EVENT_DISCONNECTED
        return closed and self.heard

    def _waiting(self) -> bool:
        """Whether a monitor event waits (one ``getsockopt``, no exception when none)."""
        return bool(cast(int, self._monitor.getsockopt(zmq.EVENTS)) & zmq.POLLIN)

    def renew(self) -> zmq.Socket[Any]:
        """Drop the socket (and all it still holds) and open a new one (guarantee 3)."""
        self.close(0)
        self.heard, self.renewals = False, self.renewals + 1
        self.socket, self._monitor = self._open()
        return self.socket

    def close(self, linger_ms: int) -> None:
        """Close the socket (flushing for up to ``linger_ms``) and its monitor."""
        self.socket.disable_monitor()
        self._monitor.close(linger=0)
        self.socket.close(linger=linger_ms)


def encode_within(
    message: messages.Message, version: int, max_message_bytes: int
) -> tuple[messages.Message, list[Any]]:
    """``message`` and its frames; when one of its frames exceeds ``max_message_bytes`` (the
    consumer would drop the connection: ``MAXMSGSIZE``), an ERROR saying so and its frames
    instead, so the trainer hears why rather than nothing."""
    frames = messages.encode(message, version)
    largest = max(memoryview(frame).nbytes for frame in frames)
    if largest <= max_message_bytes:
        return message, frames
    error = messages.Error.of(
        getattr(message, "job", ""),
        getattr(message, "unit", None),
        ValueError(
            f"{message.KIND} frame of {largest} bytes exceeds max_message_bytes="
            f"{max_message_bytes}; raise it on both ends (dataset() and "
            "h5feed produce --max-message-bytes)"
        ),
    )
    return error, messages.encode(error, version)
