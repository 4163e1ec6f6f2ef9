"""The raw ZeroMQ baseline of the socket benchmark: what plain pyzmq carries on the same path.

A sender (``python -m h5feed.bench.raw_zmq --connect ADDR``, run where the producers run)
sends, as fast as the receiver takes them, messages shaped like h5feed's DATA: a small
msgpack header frame (dtype, shape, sequence number), then one raw frame of a whole batch
(``BATCH_BYTES``, [8, 16, 112, 112, 3] uint8) sent with ``copy=False``. The receiver
(:class:`RawReceiver`, in the trainer's process) binds a ROUTER socket like h5feed's and does
what pyzmq's serialisation example does: ``recv_multipart(copy=False)``, unpack the header,
``np.frombuffer`` over the frame. No protocol, no credits, no batch assembly: the figure is
the ceiling the transport allows, GB/s of batch bytes.

With ``--key``/``--server-key`` (sender) and ``curve_secret`` (receiver) the link is CURVE
encrypted like h5feed's (the receiver is a CURVE server that, like h5feed's without an
authenticator thread, accepts any client key: the handshake is done once, per connection).

Guarantees: both sides bound every wait (the sender re-checks its parent and SIGTERM at
least every :data:`_SEND_TIMEOUT_MS`; the receiver raises TimeoutError after
:data:`RECEIVE_TIMEOUT_S` without a message), and at most a few batches sit in ZeroMQ's
queues (high-water marks of :data:`_HWM` messages each side).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np
import zmq

from h5feed.bench.contender import Contender, Setup
from h5feed.bench.workload import BATCH_SIZE, CLIP_SHAPE
from h5feed.common.trust.curve import KeyPair, client_key_files, make_client

BATCH_SHAPE = (BATCH_SIZE, *CLIP_SHAPE)
RECEIVE_TIMEOUT_S = 30.0
_SEND_TIMEOUT_MS = 200
_HWM = 4


class RawReceiver(Contender):
    """Batches from raw senders, as NumPy arrays over the received frames (no copy)."""

    def __init__(
        self, setup: Setup, address: str, curve_secret: bytes | None = None, io_threads: int = 1
    ) -> None:
        """``io_threads``: ZeroMQ I/O threads of the receiving context (where CURVE
        decrypts: ``h5feed bench --ceiling --io-threads N``)."""
        super().__init__(setup)
        self.address = address
        self._context = zmq.Context(io_threads=io_threads)
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVHWM, _HWM)
        self._socket.setsockopt(zmq.RCVTIMEO, int(RECEIVE_TIMEOUT_S * 1000))
        if curve_secret is not None:
            self._socket.curve_secretkey = curve_secret
            self._socket.curve_server = True
        self._socket.bind(address)

    def next_frames(self) -> Any:
        try:
            _identity, header, frame = self._socket.recv_multipart(copy=False)
        except zmq.Again:
            raise TimeoutError(
                f"raw ZeroMQ: no message on {self.address} in {RECEIVE_TIMEOUT_S:g} s"
            ) from None
        meta = msgpack.unpackb(header.buffer)
        return np.frombuffer(frame.buffer, np.dtype(meta["dtype"])).reshape(meta["shape"])

    def close(self) -> None:
        self._socket.close(linger=0)
        self._context.term()


def send_forever(address: str, curve: tuple[KeyPair, bytes] | None, parent_pid: int | None) -> int:
    """Send batch-shaped messages to ``address`` until SIGTERM or the parent is gone."""
    stop = [False]

    def on_sigterm(signum: int, frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_sigterm)
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, _HWM)
    socket.setsockopt(zmq.SNDTIMEO, _SEND_TIMEOUT_MS)
    if curve is not None:
        make_client(socket, *curve)
    socket.connect(address)
    batch = np.zeros(BATCH_SHAPE, np.uint8)  # never written again: safe to send while queued
    seq = 0
    try:
        while not stop[0] and (parent_pid is None or os.getppid() == parent_pid):
            header = msgpack.packb(
                {"seq": seq, "dtype": batch.dtype.str, "shape": list(batch.shape)}
            )
            try:
                frames: list[Any] = [header, batch]
                socket.send_multipart(frames, copy=False)
            except zmq.Again:
                continue
            seq += 1
    finally:
        socket.close(linger=0)
        context.term()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m h5feed.bench.raw_zmq")
    parser.add_argument("--connect", required=True, help="the receiver's address")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when it is gone")
    parser.add_argument("--cpus", default="", help="run on these CPUs only, e.g. 1,2")
    parser.add_argument("--key", default=None, help="CURVE: this sender's .key_secret file")
    parser.add_argument("--server-key", default=None, help="CURVE: the receiver's .key file")
    args = parser.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        curve = client_key_files(args.key, args.server_key)
    except ValueError as exc:
        parser.error(str(exc))
    return send_forever(args.connect, curve, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
