"""A TCP relay between producers and a trainer that can break their connections on demand,
losing what is on the way: what a network cut, or a pause of the whole job longer than the
heartbeat timeout, does to a ZeroMQ connection (both ends reconnect by themselves, and the
messages in flight are gone).

``CutProxy(target_port)`` listens on ``port`` (loopback) and relays every connection to the
target. :meth:`cut` first swallows what the trainer sends for ``swallow_s`` (so a UNIT it
believes sent is lost), then closes every relayed connection; new connections are relayed
as before. Threads only, no sockets left behind after :meth:`close`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time

_CHUNK = 1 << 16
_POLL_S = 0.05


class CutProxy:
    """A loopback TCP relay to ``127.0.0.1:target_port`` whose connections can be cut."""

    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._swallow_until = 0.0
        self._closed = threading.Event()
        #: Connections relayed so far (a reconnection is a new one).
        self.accepted = 0
        self.cuts = 0
        threading.Thread(target=self._accept, name="cut-proxy", daemon=True).start()

    def swallow(self) -> None:
        """From now until the next :meth:`cut`, what the trainer sends is lost on the way."""
        self._swallow_until = float("inf")

    def cut(self, swallow_s: float = 0.0) -> None:
        """Swallow what the trainer sends for ``swallow_s`` more, then close every connection
        (and relay what comes after as before)."""
        self._swallow_until = time.monotonic() + swallow_s
        time.sleep(swallow_s)
        self._swallow_until = 0.0
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self.cuts += 1
        for pair in pairs:
            for end in pair:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.cut(0)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                producer, _ = self._listener.accept()
            except OSError:
                return
            try:
                trainer = socket.create_connection(self._target, timeout=5)
            except OSError:
                producer.close()
                continue
            with self._lock:
                self._pairs.append((producer, trainer))
                self.accepted += 1
            threading.Thread(
                target=self._relay, args=(producer, trainer), name="cut-proxy-relay", daemon=True
            ).start()

    def _relay(self, producer: socket.socket, trainer: socket.socket) -> None:
        """Copy bytes both ways until either end closes; bytes from the trainer are dropped
        while a cut swallows them."""
        ends = [producer, trainer]
        try:
            while not self._closed.is_set():
                readable, _, _ = select.select(ends, [], [], _POLL_S)
                for end in readable:
                    data = end.recv(_CHUNK)
                    if not data:
                        return
                    if end is trainer:
                        if time.monotonic() < self._swallow_until:
                            continue  # lost on the way
                        producer.sendall(data)
                    else:
                        trainer.sendall(data)
        except (OSError, ValueError):  # closed by a cut
            return
        finally:
            for end in ends:
                with contextlib.suppress(OSError):
                    end.close()
