"""Many synthetic workers in one process: one DEALER socket each, one poller for them all.

``python -m h5feed.bench.swarm --connect ADDR --first I --count M [--parent-pid P]`` runs M
:class:`~h5feed.bench.synthetic_worker.SyntheticWorker`s named ``swarm-I`` ..
``swarm-(I+M-1)``: to the trainer each is a worker of its own (its own connection, identity,
HELLO, JOB, INDEX and UNIT/DATA, the real wire protocol), but they share one ZeroMQ context
and one thread, so a thousand workers fit on a few processes and no core
(:mod:`h5feed.bench.many_workers`). Nothing is read or decoded: a UNIT is answered at once
(:mod:`h5feed.bench.synthetic_worker`).

What differs from a real worker's process: the members are served in turn by one poll, so
one member's send that waits (the trainer's queue full) delays the others; and a SIGKILL or
SIGSTOP of the process takes all of its members at once, which is what the study wants (a
host of workers vanishing).

Limits raised here: libzmq's ``MAX_SOCKETS`` (1,023 per context by default) to the count
plus a margin, and the soft ``RLIMIT_NOFILE`` (each socket holds a mailbox descriptor and
its connection one more: :func:`h5feed.common.system.fd_limit.raise_open_files_limit`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence

import zmq

from h5feed.bench.synthetic_worker import SyntheticWorker
from h5feed.common.errors import ProtocolError, VersionMismatchError
from h5feed.common.protocol.liveness import WORKER_TIMEOUT_S, enable_heartbeats
from h5feed.common.protocol.messages import decode_said
from h5feed.common.system.fd_limit import raise_open_files_limit
from h5feed.common.worker_settings import Network, Process, WorkerSettings

_POLL_MS = 200
_TELL_EVERY = 15  # hellos without a job between two warnings
_SOCKET_MARGIN = 16  # sockets of the context beyond the members' (none today; headroom)
_log = logging.getLogger("h5feed.bench.swarm")


class SwarmMember(SyntheticWorker):
    """A synthetic worker whose socket lives in a context shared with the other members.

    :class:`~h5feed.producer.worker.loop.Worker` makes its own context and socket; here they
    are closed at once and the socket made again, with the same options, in ``context`` (a
    context per member would cost a thread per member)."""

    def __init__(
        self, settings: WorkerSettings, context: zmq.Context[zmq.Socket[bytes]], host: str
    ) -> None:
        super().__init__(settings, None, host=host)
        # The worker's connection holds a monitor socket too: the context ends only once
        # both are closed. A member does not start over on a broken connection (the swarm
        # serves its members by one poll; Worker.run, which checks, never runs here).
        self.connection.close(0)
        self.context.term()
        self.context = context
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, 500)
        sock.setsockopt(zmq.ROUTING_ID, self.worker_id.encode())
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        enable_heartbeats(sock, WORKER_TIMEOUT_S)
        sock.connect(settings.network.connect)
        self.socket = sock
        self.hellos = 0  # said without a job (the trainer answers the first with one)

    def serve_one(self) -> None:
        """Take and handle the one message waiting on the socket (its poll said so)."""
        frames = self.socket.recv_multipart(copy=False)
        self._last_heard = time.monotonic()
        try:
            message, self.protocol = decode_said(frames)
        except (VersionMismatchError, ProtocolError) as exc:
            _log.warning("%s: dropped a message: %s", self.worker_id, exc)
            return
        self.handle(message)


def run(connect: str, first: int, count: int, parent_pid: int | None) -> int:
    """Serve ``count`` members until every one was told BYE, the parent is gone, or SIGTERM."""
    raise_open_files_limit()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    context.set(zmq.MAX_SOCKETS, count + _SOCKET_MARGIN)
    # Each process plays a host of its own (a replica of a fleet): its members say so in
    # HELLO, so the trainer offers them no shared-memory slot (as it would not a remote
    # replica's) and knows which workers a stopped process takes down together.
    host = f"{socket.gethostname()}-swarm{first}"
    members = [
        SwarmMember(
            WorkerSettings(Network(connect), Process(f"swarm-{first + i}", parent_pid)),
            context,
            host,
        )
        for i in range(count)
    ]
    stop = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_sigterm)
    poller = zmq.Poller()
    by_socket = {}
    for member in members:
        poller.register(member.socket, zmq.POLLIN)
        by_socket[member.socket] = member
        member.hello()
    try:
        while not stop and not all(m.stopping for m in members):
            if parent_pid is not None and os.getppid() != parent_pid:
                break
            now = time.monotonic()
            for member in members:
                if not member.stopping and member.should_say_hello(now):
                    member.hellos += 1
                    if member.hellos % _TELL_EVERY == 0:  # a member the trainer never took
                        _log.warning("%s: %d hellos, no job yet", member.worker_id, member.hellos)
                    member.hello()
            for sock, _ in poller.poll(_POLL_MS):
                by_socket[sock].serve_one()
    finally:
        for member in members:
            member.end_job()
            member.socket.close(linger=0)
        context.term()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m h5feed.bench.swarm")
    parser.add_argument("--connect", required=True)
    parser.add_argument("--first", type=int, default=0, help="number of the first member")
    parser.add_argument("--count", type=int, required=True, help="members (sockets)")
    parser.add_argument("--parent-pid", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("H5FEED_LOG_LEVEL", "WARNING"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return run(args.connect, args.first, args.count, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
