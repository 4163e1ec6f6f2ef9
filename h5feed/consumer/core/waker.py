"""A self-pipe that lets any thread wake a thread blocked in ``zmq.Poller.poll``.

Guarantees: :meth:`Waker.wake` never blocks and is safe from any thread, before or after
:meth:`Waker.close`; after ``close`` it does nothing (the descriptors are gone and their numbers
may belong to other files by then, so nothing is written to them). A wake-up carries no data:
callers keep their counts elsewhere, and several wake-ups may arrive as one.
"""

from __future__ import annotations

import contextlib
import os
import threading


class Waker:
    def __init__(self) -> None:
        self.fileno, self._write_fd = os.pipe()
        os.set_blocking(self.fileno, False)
        os.set_blocking(self._write_fd, False)
        self._lock = threading.Lock()
        self._open = True

    def wake(self) -> None:
        with self._lock:
            if self._open:
                # A full pipe (BlockingIOError) means a wake-up is pending already.
                with contextlib.suppress(BlockingIOError):
                    os.write(self._write_fd, b"\0")

    def drain(self) -> None:
        """Consume pending wake-ups (call after the poller reported ``fileno`` readable)."""
        with self._lock:
            if self._open:
                with contextlib.suppress(BlockingIOError):  # a spurious wake-up
                    os.read(self.fileno, 4096)

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                os.close(self.fileno)
                os.close(self._write_fd)
