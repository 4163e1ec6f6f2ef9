"""SIGTERM as a request to stop at the next step boundary (``h5feed.BackupAndRestore(...,
save_on_sigterm=True)``): a cluster scheduler's preemption (SLURM, a Kubernetes eviction)
sends SIGTERM, then SIGKILL after a grace period; a trainer that dies at the SIGTERM loses
every step since its last save.

Guarantees (:class:`StopSignal`):

1. Nothing is installed until :meth:`StopSignal.arm` (called in the main thread: Python runs
   signal handlers there only; elsewhere a ValueError saying so). The handler only sets a
   flag and notes the time: the save happens in the training thread, at the next step
   boundary, never inside the handler (which may interrupt anything, a half-written file
   included).
2. The handler that was installed before is kept: :meth:`StopSignal.finish` (after the save)
   puts it back and raises the signal again, so it runs as if the signal had just arrived:
   the default action ends the process by SIGTERM (exit status 143 in a shell, -15 from
   ``subprocess``: what SLURM and Kubernetes expect of a process they stopped); a handler of
   your own runs (and decides); an ignored SIGTERM stays ignored (training goes on). Python's
   output buffers are flushed first.
3. :meth:`StopSignal.disarm` (training ended) puts the previous handler back; a SIGTERM that
   reaches a handler left behind (training raised before ``disarm``) is passed on to the
   previous handler at once, never swallowed.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from typing import Any

_log = logging.getLogger("h5feed.consumer")


class StopSignal:
    """A signal (SIGTERM) turned into a flag read at step boundaries (see the module
    docstring)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signum
        self._previous: Any = None
        self._armed = False
        self.received_at: float | None = None  # time.monotonic() of the first signal

    @property
    def requested(self) -> bool:
        return self.received_at is not None

    def arm(self) -> None:
        """Install the handler (idempotent); ValueError outside the main thread."""
        if self._armed:
            return
        if threading.current_thread() is not threading.main_thread():
            raise ValueError(
                "h5feed.BackupAndRestore(save_on_sigterm=True) needs fit() in the main thread: "
                "Python runs signal handlers only there"
            )
        self._previous = signal.signal(self.signum, self._on_signal)
        self._armed = True

    def disarm(self) -> None:
        """Put the previous handler back (idempotent)."""
        if self._armed and threading.current_thread() is threading.main_thread():
            signal.signal(self.signum, self._previous)
            self._armed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._armed:
            if self.received_at is None:
                self.received_at = time.monotonic()
            return
        _pass_on(self._previous, signum, frame)  # a handler left behind (guarantee 3)

    def finish(self) -> None:
        """After the save: the previous handler back, and the signal raised again for it
        (guarantee 2). Returns only where that handler lets the process go on."""
        waited = time.monotonic() - (self.received_at or time.monotonic())
        _log.warning(
            "h5feed: %s received %.1f s ago: saved at the step in hand; passing it on",
            signal.Signals(self.signum).name, waited,
        )  # fmt: skip
        self.received_at = None
        self.disarm()
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.raise_signal(self.signum)


def _pass_on(previous: Any, signum: int, frame: Any) -> None:
    """Act on a signal as ``previous`` (a handler or SIG_DFL / SIG_IGN / None) would."""
    if callable(previous):
        previous(signum, frame)
    elif previous in (signal.SIG_DFL, None):
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
