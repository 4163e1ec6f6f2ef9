"""What a worker process sets up about itself when it starts: it dies with its parent, and it
may open as many files as its hard limit allows.

Guarantees:

1. :func:`die_with_parent` (Linux): once it returns True, the kernel sends this process
   SIGKILL when its parent goes, even while the worker is blocked in a call it never returns
   from (a slow transform, a read from a hung filesystem), where the worker's own check of its
   parent pid between messages cannot run. It returns False when the parent is already gone
   (it died before the request took effect: the caller must exit), so no window is left open.
   The kernel's "parent" is the *thread* that forked this process (prctl(2)): the trainer
   forks its workers from one long-lived thread (``h5feed/consumer/processes/spawner.py``).
2. :func:`raise_open_files_limit` (from ``h5feed/common/fd_limit.py``) raises the soft
   ``RLIMIT_NOFILE`` to the hard limit (the most an unprivileged process may), so sockets,
   shared memory and the job's open HDF5 files (at most ``max_open_files``, see
   ``h5feed/producer/open_files.py``) fit.
3. :func:`drop_working_directory` removes the working directory ``python -m`` put first on
   ``sys.path`` (a producer's workers, which also run ``python -P``, and ``h5feed produce``):
   user code named by a consumer is never looked for where the process happened to start.
   The trainer's local workers keep it (they run what the trainer runs, from its directory).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

from h5feed.common.fd_limit import raise_open_files_limit

__all__ = ["die_with_parent", "drop_working_directory", "raise_open_files_limit"]

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
