"""What a worker process sets up about itself when it starts: it dies with its parent, it takes
SIGTERM from its parent only, and it may open as many files as its hard limit allows.

Guarantees:

1. :func:`die_with_parent` (Linux): once it returns True, the kernel sends this process
   SIGKILL when its parent goes, even while the worker is blocked in a call it never returns
   from (a slow transform, a read from a hung filesystem), where the worker's own check of its
   parent pid between messages cannot run. It returns False when the parent is already gone
   (it died before the request took effect: the caller must exit), so no window is left open.
   The kernel's "parent" is the *thread* that forked this process (prctl(2)): the trainer
   forks its workers from one long-lived thread (``h5feed/consumer/processes/spawner.py``).
2. :func:`raise_open_files_limit` (from ``h5feed/common/system/fd_limit.py``) raises the soft
   ``RLIMIT_NOFILE`` to the hard limit (the most an unprivileged process may), so sockets,
   shared memory and the job's open HDF5 files (at most ``max_open_files``, see
   ``h5feed/producer/files/open_files.py``) fit.
3. :func:`drop_working_directory` removes the working directory ``python -m`` put first on
   ``sys.path`` (a producer's workers, which also run ``python -P``, and ``h5feed produce``):
   user code named by a consumer is never looked for where the process happened to start.
   The trainer's local workers keep it (they run what the trainer runs, from its directory).
4. :func:`sigterm_from_parent_only`: a worker born with SIGTERM blocked (the trainer starts
   its local workers so: ``h5feed/consumer/processes/spawner.py``) and given ``--parent-pid``
   handles a SIGTERM that its parent sent (the trainer stopping or retiring it) as before, by
   the Python handler of SIGTERM in the main thread (it leaves after the unit in hand), and
   ignores, logged, a SIGTERM from anyone else. A cluster scheduler's preemption signals
   every process of the job at once (SLURM: each process of the step; ``killpg``); the
   workers keep serving, so the trainer's last steps up to its emergency checkpoint still
   get their batches, and they go when the trainer does (guarantee 1) or stops them. By
   hand, such a worker is stopped with SIGKILL or by stopping its trainer. Why born
   blocked: a process-directed signal goes to any thread that does not block it, and the
   libraries a worker imports start threads (OpenBLAS) before its ``main`` runs; the mask
   is inherited by every thread, and one thread takes the signal with ``sigwaitinfo``,
   which tells who sent it (a Python handler is never told). A worker born unblocked (a
   producer's, started by ``h5feed produce``) handles every SIGTERM, as before.
"""

from __future__ import annotations

import _thread
import ctypes
import logging
import os
import signal
import sys
import threading

from h5feed.common.system.fd_limit import raise_open_files_limit

__all__ = [
    "die_with_parent",
    "drop_working_directory",
    "raise_open_files_limit",
    "sigterm_from_parent_only",
]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_log = logging.getLogger("h5feed.worker")


def die_with_parent(parent_pid: int) -> bool:
    """Ask for SIGKILL when the parent (``parent_pid``) dies; False if it is gone already.
    On systems without prctl only the check is made (the worker loop's polling remains)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            _log.warning("PR_SET_PDEATHSIG failed: %s", os.strerror(errno))
    # Checked after the request: a parent that died before it took effect is seen here.
    return os.getppid() == parent_pid


def drop_working_directory() -> bool:
    """Remove the working directory that ``python -m`` (or ``-c``) put first on ``sys.path``;
    whether it was there. One given on ``PYTHONPATH`` stays: the operator's choice."""
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
        return True
    return False


def sigterm_from_parent_only(parent_pid: int | None) -> bool:
    """Where this process was born with SIGTERM blocked and has a ``parent_pid``, start the
    thread that passes on its parent's SIGTERMs only (guarantee 4) and return True. Else
    make sure SIGTERM is not blocked (every SIGTERM is handled) and return False. Call it
    from the main thread, once its SIGTERM handler is installed: a parent's SIGTERM runs that
    handler in the main thread (``_thread.interrupt_main``), as a signal would."""
    blocked = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    if not blocked:
        return False
    if parent_pid is None or not hasattr(signal, "sigwaitinfo"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        return False
    threading.Thread(
        target=_sigterm_waiter, args=(parent_pid,), name="h5feed-sigterm", daemon=True
    ).start()
    return True


def _sigterm_waiter(parent_pid: int) -> None:
    """Forever: wait for the next SIGTERM; the parent's goes to the main thread's handler,
    another sender's is ignored (logged: the first, then every 100th, so a loop of signals
    cannot flood the log)."""
    ignored = 0
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == parent_pid:
            _thread.interrupt_main(signal.SIGTERM)
            continue
        if ignored % 100 == 0:
            _log.info(
                "SIGTERM from pid %d ignored (%d so far): this worker takes SIGTERM from its "
                "parent %d only and goes when it does (a preemption signals every process of "
                "the job; the trainer still needs batches until its checkpoint)",
                info.si_pid, ignored + 1, parent_pid,
            )  # fmt: skip
        ignored += 1
