"""How both ends notice a peer that vanished: ZeroMQ heartbeats plus one application rule.

A peer killed by SIGKILL on another host, a host that goes down, a cable that is cut or a
process that is stopped (SIGSTOP, a debugger) sends nothing: TCP may not notice for many
minutes. ZeroMQ's heartbeats (ZMTP PING/PONG, answered by libzmq's I/O thread, so a worker
busy in a long decode still answers) close a connection whose peer stops answering within
``HEARTBEAT_TIMEOUT``. Socket monitor events say *that* a connection closed, not *whose*, so
the consumer adds one rule (``h5feed.consumer.core.session``): every peer not heard from for
:data:`PROBE_EVERY_S` is sent a PING, and with ``ROUTER_MANDATORY`` that send fails once the
connection is gone. libzmq starts a connection's timeout clock at the first heartbeat it sends
after the last message it received (any message received stops it), so that clock starts up
to one :data:`HEARTBEAT_IVL_S` after the peer fell silent. So a vanished peer is declared lost
within

    one heartbeat interval
    + heartbeat timeout (``peer_timeout_s`` - :data:`HEARTBEAT_IVL_S` - :data:`PROBE_EVERY_S`
      - :data:`_SLACK_S`)
    + one probe period + one health check  <=  ``peer_timeout_s``

(:func:`loss_bound`; the heartbeat timeout is at least two intervals, so below 2.5 s of
``peer_timeout_s`` the bound stops shrinking, at 2.2 s).

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
    """The heartbeat timeout that makes a vanished peer lost within ``peer_timeout_s``.

    The interval is taken off as well as the probe period and the slack: libzmq arms a
    connection's timeout at its first PING after the last message received, up to one
    interval after the peer fell silent. Without it the bound was ``peer_timeout_s`` + 0.2 s,
    and a thousand connections timing out together on a loaded machine went further over.
    """
    return max(peer_timeout_s - HEARTBEAT_IVL_S - PROBE_EVERY_S - _SLACK_S, HEARTBEAT_IVL_S * 2)


def loss_bound(peer_timeout_s: float, health_every_s: float) -> float:
    """How long after a peer falls silent the consumer declares it lost, at the latest (the
    sum in this module's docstring; ZeroMQ's I/O thread and the loop running on time)."""
    return (
        HEARTBEAT_IVL_S
        + consumer_heartbeat_timeout(peer_timeout_s)
        + PROBE_EVERY_S
        + health_every_s
    )
