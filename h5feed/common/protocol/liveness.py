"""How both ends notice a peer that vanished: ZeroMQ heartbeats plus one application rule.

A peer killed by SIGKILL on another host, a host that goes down, a cable that is cut or a
process that is stopped (SIGSTOP, a debugger) sends nothing: TCP may not notice for many
minutes. ZeroMQ's heartbeats (ZMTP PING/PONG, answered by libzmq's I/O thread, so a worker
busy in a long decode still answers) close a connection whose peer stops answering within
``HEARTBEAT_TIMEOUT``. Socket monitor events say *that* a connection closed, not *whose*, so
the consumer adds one rule (``h5feed.consumer.core.session``): every peer not heard from for
:data:`PROBE_EVERY_S` is sent a PING, and with ``ROUTER_MANDATORY`` that send fails once the
connection is gone. So a vanished peer is declared lost within

    heartbeat timeout (``peer_timeout_s`` - :data:`PROBE_EVERY_S` - :data:`_SLACK_S`)
    + one probe period + one health check  <=  ``peer_timeout_s``.

Workers run heartbeats too (with a fixed timeout, :data:`WORKER_TIMEOUT_S`): a worker whose
consumer vanished reconnects (ZeroMQ does) and says hello to whoever listens there next.
"""

from __future__ import annotations

from typing import Final

import zmq

#: How long a peer may stay silent before the consumer probes its connection.
PROBE_EVERY_S: Final = 0.5
#: Heartbeat interval on every connection.
HEARTBEAT_IVL_S: Final = 0.5
#: What the probe period and the loop's health check (every 0.2 s) may add to the timeout.
_SLACK_S: Final = 0.5
#: A worker's heartbeat timeout towards its consumer (it cannot know the consumer's option).
WORKER_TIMEOUT_S: Final = 10.0


def enable_heartbeats(socket: zmq.Socket[bytes], timeout_s: float) -> None:
    """Heartbeats on every connection of ``socket`` (before it binds or connects): one PING
    every :data:`HEARTBEAT_IVL_S`; a connection silent for ``timeout_s`` is closed; the remote
    end is asked (TTL) to close it after ``timeout_s`` of silence from this side too."""
    milliseconds = int(timeout_s * 1000)
    socket.setsockopt(zmq.HEARTBEAT_IVL, int(HEARTBEAT_IVL_S * 1000))
    socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, milliseconds)
    socket.setsockopt(zmq.HEARTBEAT_TTL, milliseconds)


def consumer_heartbeat_timeout(peer_timeout_s: float) -> float:
    """The heartbeat timeout that makes a vanished peer lost within ``peer_timeout_s``."""
    return max(peer_timeout_s - PROBE_EVERY_S - _SLACK_S, HEARTBEAT_IVL_S * 2)
