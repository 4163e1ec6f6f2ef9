"""When a worker leaves, and how long a send may wait meanwhile (the worker's guarantees 1
and 5: :class:`~h5feed.producer.worker.loop.Worker`).

A worker leaves when it is asked to stop (SIGTERM: :meth:`Leaving.request`), when its
consumer says BYE (not persistent, or refused), or when its parent process is gone. A send
that waits for the consumer re-checks these every retry: the DATA of a unit it made is worth
waiting for until ``stop_wait_s`` after the stop request; nothing else is. No sockets here:
the event loop asks, and raises :class:`Leave` when told to.
"""

from __future__ import annotations

import logging
import os
import time

from h5feed.common.worker_settings import Process

__all__ = ["Leave", "Leaving"]

_log = logging.getLogger("h5feed.worker")


class Leave(Exception):
    """Raised inside the event loop when the worker must stop (BYE, SIGTERM, parent gone)."""


class Leaving:
    """The leave policy of one worker (``process``: its settings' lifetime group). Single
    threaded, except that :meth:`request` may run in a signal handler (it only sets
    attributes)."""

    def __init__(self, process: Process) -> None:
        self.worker_id = process.worker_id
        self.parent_pid = process.parent_pid
        self.stop_wait_s = process.stop_wait_s
        #: No new message is taken (asked to stop, or told by a BYE).
        self.stopping = False
        #: When a send must give up (``stop_wait_s`` after the stop request); None: not asked.
        self.deadline: float | None = None
        #: A message it made could not be sent within the stop wait: it says no BYE.
        self.undelivered = False
        #: Units whose DATA it sent after the stop request (logged).
        self.sent_after_stop = 0

    def request(self) -> None:
        """Stop after the unit in hand; the stop wait runs from the first request (a
        container's SIGTERM reaches a worker both from dumb-init and from its service)."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.stop_wait_s
        self.stopping = True

    def parent_gone(self) -> bool:
        """Whether the process that started this worker (``--parent-pid``) is gone."""
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            _log.info("worker %s: parent %d is gone, exiting", self.worker_id, self.parent_pid)
            return True
        return False

    def check(self) -> None:
        """Raise :class:`Leave` when the worker must stop: asked to, or its parent process is
        gone (checked between messages, never inside a unit)."""
        if self.stopping or self.parent_gone():
            raise Leave

    def check_send(self, made: bool) -> None:
        """While a send waits for the consumer: raise :class:`Leave` when the parent is gone,
        or when asked to stop, unless the message is a unit ``made`` (DATA) and the stop wait
        is not over: that one is worth the wait. Past the wait it is not delivered (no BYE
        follows). Anything else (a HELLO to a consumer never reached, an INDEX) is not waited
        for."""
        if self.parent_gone():
            raise Leave
        deadline = self.deadline
        if self.stopping and not made:
            raise Leave
        if deadline is not None and time.monotonic() >= deadline:
            _log.warning(
                "worker %s: the consumer took no message for %g s after the stop request "
                "(stop_wait_s): leaving without it",
                self.worker_id, self.stop_wait_s,
            )  # fmt: skip
            self.undelivered = True
            raise Leave
        if self.stopping and deadline is None:  # `stopping` set by a BYE, not request()
            raise Leave
